"""The loader validates the capture ops and attributes (serialize/capture_ops.py): a tampered file is a
LoadError saying what is wrong, never code run from the file."""
import io

import pytest
import torch

import tracejit
from capture_testlib import nodes_of, quiet_trace, tampered


class STE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, g):
        return g


def program(x):
    with torch.no_grad():
        m = torch.full((x.shape[0],), torch.finfo(x.dtype).min, dtype=x.dtype, device=x.device)
    return STE.apply(x) + m.clamp(min=-1)


def _load(raw):
    return tracejit.load(io.BytesIO(raw))


def _first(doc, op):
    return next(n for n in nodes_of(doc) if n["op"] == op)


def _edit_first(op, change):
    def edit(doc):
        change(_first(doc, op))
    return edit


TRACED = None


def traced():
    global TRACED
    if TRACED is None:
        TRACED = quiet_trace(program, (torch.randn(3),))
    return TRACED


def test_untampered_file_loads_and_runs():
    x = torch.randn(5, dtype=torch.float64)
    loaded = _load(tampered(traced(), lambda doc: None))
    torch.testing.assert_close(loaded(x), program(x))


@pytest.mark.parametrize("edit,message", [
    (_edit_first("tracejit::finfo", lambda n: n["attrs"].update(attr="__class__")), "finfo attribute"),
    (_edit_first("tracejit::finfo", lambda n: n.update(args=[{"v": 0}])), "needs a recorded dtype"),
    (_edit_first("tracejit::dtype_of", lambda n: n.update(outputs=[{"scalar": "int"}])), "must define a dtype"),
    (_edit_first("tracejit::dtype_of", lambda n: n.update(args=[])), "one argument"),
    (_edit_first("tracejit::device_of", lambda n: n.update(kwargs=[["x", 1]])), "no keyword"),
    (_edit_first("tracejit::autograd_function", lambda n: n["attrs"].update(name=7)), "needs its name|'name' must be a str"),
    (_edit_first("tracejit::autograd_function", lambda n: n.update(args=[{"v": 0}])), "takes \\(arguments"),
    (_edit_first("tracejit::autograd_function", lambda n: n["attrs"].update(unpack=3)), "unpack count"),
    (_edit_first("aten::full.default", lambda n: n["attrs"].update(grad="os.system")), "unknown grad mode"),
    (_edit_first("aten::round.default", lambda n: n["attrs"].update(in_function="x")), "in_function"),
    (_edit_first("aten::full.default", lambda n: n["attrs"].update(autocast=["cpu:float16); import os; ("])),
     "malformed autocast"),
    (_edit_first("aten::full.default", lambda n: n["attrs"].update(autocast="cpu:bfloat16")),
     "malformed autocast|'autocast' must be a list"),
])
def test_tampered_capture_nodes_are_load_errors(edit, message):
    with pytest.raises(tracejit.LoadError, match=message):
        _load(tampered(traced(), edit))
