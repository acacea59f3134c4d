"""One escaping helper per sink (tracejit/escape.py), and the tools that use them, in-process:
the viewer's script data, the terminal, warnings; and the viewer's size probe, which runs no kernel
on data (issue #21, item 5)."""
from __future__ import annotations

import io
import json
import warnings

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import tracejit
from tracejit.escape import script_json, terminal, terminal_lines
from tracejit.viewer import program_document, render_html
from security_testlib import module, rewrite
from catalogue_tools import HTML_BREAKERS, TERMINAL, tools_base
from test_tool_files import page_data


@pytest.mark.parametrize("text", HTML_BREAKERS + ["a & b", "\u2028", "</scr" + "ipt>"])
def test_script_json_holds_no_markup_and_decodes_back(text):
    out = script_json({"k": text, text: [text]})
    assert not any(c in out for c in "<>&\u2028\u2029")
    assert json.loads(out) == {"k": text, text: [text]}


@pytest.mark.parametrize("text", TERMINAL)
def test_terminal_shows_every_control_and_format_character_escaped(text):
    out = terminal(text)
    assert out.isprintable() and "\n" not in out
    kept = terminal_lines(text)
    assert kept.count("\n") == text.count("\n") and all(line.isprintable() for line in kept.split("\n"))


def test_terminal_keeps_printable_text_and_is_linear():
    assert terminal("añb 日本 x") == "añb 日本 x"
    assert terminal("\x1b[2J\u202e\x9b\r\x00") == "\\x1b[2J\\u202e\\x9b\\r\\x00"
    assert terminal("x" * 10 ** 6 + "\x07").endswith("x\\x07")


def test_the_page_of_a_hostile_module_type_keeps_its_scripts():
    raw, _ = tools_base()
    for text in HTML_BREAKERS:
        obj = tracejit.load(io.BytesIO(rewrite(raw, edit_doc=lambda d, t=text: module(d, "").__setitem__("type", t))),
                            map_location="meta")
        data = page_data(render_html(program_document(obj)))
        assert data["name"] == text


class _Spy(TorchDispatchMode):
    """Records the device of every tensor an op receives or makes."""

    def __init__(self):
        super().__init__()
        self.devices = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for x in torch.utils._pytree.tree_leaves((args, kwargs, out)):
            if isinstance(x, torch.Tensor):
                self.devices.add(x.device.type)
        return out


class Factories(nn.Module):
    """Builds tensors on the CPU from sizes it reads: the probe must move them to meta."""

    def forward(self, x):
        n = x.size(0)
        ramp = torch.arange(n, device="cpu", dtype=torch.float32)
        lit = torch.tensor([1.0, 2.0])
        return x * ramp[:, None] + lit.sum(), torch.zeros(n * 2, device=torch.device("cpu"))


def test_the_viewer_probe_runs_no_kernel_on_data():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(Factories(), torch.randn(3, 2))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    loaded = tracejit.load(io.BytesIO(buf.getvalue()))   # on the CPU: real tensors in the module
    spy = _Spy()
    with spy:
        doc = program_document(loaded)
    assert spy.devices == {"meta"}, spy.devices
    types = [n["type"] for n in doc["graphs"][":forward"]["nodes"] if n["kind"] == "output"]
    assert types == ["Float[s0, s1]", "Float[2*s0]"]   # the sizes are still named (the width moves too)


def test_cli_warnings_are_escaped(capsys):
    from tracejit.cli.app import _escaped_warning
    _escaped_warning(UserWarning("bad \x1b[2J name\nforged line"), UserWarning, "<tracejit:x\x07#1>", 3)
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\\x1b[2J" in err
    assert err.count("\n") == 1
