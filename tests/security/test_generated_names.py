"""Generated code only binds names tracejit mints: legitimate traces whose values are named like a builtin
the code uses (``slice``) or that hold inf / nan constants run correctly, compared with eager and
torch.jit.trace on new inputs, before and after a save/load round trip."""
from __future__ import annotations

import ast
import io
import math
import warnings

import pytest
import torch

import tracejit
from tracejit.codegen.python import RESERVED

from security_testlib import parse, rewrite


def _roundtrip(traced):
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    return tracejit.load(buf)


def _quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def slicing(x, idx):
    head = x[:, 1:4]                 # values the namer calls after aten::slice
    y = head.clone()
    y[idx, 0:2] = 5.0
    return head[idx, 0:2] * 2, y


def test_value_named_slice_does_not_shadow_the_builtin():
    x, idx = torch.randn(5, 6), torch.tensor([0, 3])
    traced = _quiet(lambda: tracejit.trace(slicing, (x, idx)))
    reference = _quiet(lambda: torch.jit.trace(slicing, (x, idx)))
    assert "slice_ = " in traced.code and "slice = " not in traced.code
    _check_names(traced.code)
    x2, idx2 = torch.randn(7, 6), torch.tensor([1, 2, 6])
    want = slicing(x2, idx2)
    assert want[0].shape != slicing(x, idx)[0].shape   # new shapes: the inputs matter
    for program in (traced, _roundtrip(traced)):
        for got, ref, exp in zip(program(x2, idx2), reference(x2, idx2), want):
            torch.testing.assert_close(got, exp)
            torch.testing.assert_close(got, ref)


def capped(x, cap: float):
    return x.clamp(max=cap).masked_fill(x < -1, float("-inf")).nan_to_num(nan=0.0, neginf=-7.0)


def test_inf_and_nan_constants_are_emitted_safely():
    x = torch.randn(6) * 3
    traced = _quiet(lambda: tracejit.trace(capped, (x, math.inf)))
    x2 = torch.tensor([-3.0, -0.5, 0.0, 2.0, float("nan"), 9.0])
    want = capped(x2, math.inf)
    assert (want == -7.0).any()      # the -inf fill path is exercised
    for program in (traced, _roundtrip(traced)):
        torch.testing.assert_close(program(x2, math.inf), want, equal_nan=True)
        with pytest.raises(ValueError, match="constant"):
            program(x2, 3.0)          # the trace depends on cap == inf and says so


def _globals_read(code: str) -> set:
    """Names generated code reads without binding them (its globals and builtins)."""
    tree = ast.parse(code)
    bound, read = set(), set()
    for n in ast.walk(tree):
        if isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, ast.Name):
            (bound if isinstance(n.ctx, ast.Store) else read).add(n.id)
        elif isinstance(n, ast.FunctionDef):
            bound.add(n.name)
    return read - bound, bound


def _check_names(code: str):
    read, bound = _globals_read(code)
    assert all(n in RESERVED or n.startswith("_tj_") for n in read), read
    assert all(n.isascii() and n.isidentifier() and n not in RESERVED and not n.startswith("__") for n in bound
               if n != "self"), bound


def test_every_name_in_generated_code_is_minted(tmp_path):
    """Hostile names in a file (NFKC look-alikes of globals, builtins, dunders) only colour minted names."""
    from security_testlib import Net
    net = Net().eval()
    traced = _quiet(lambda: tracejit.trace(net, torch.randn(2, 2, 5, 5)))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    hostile = ["ｔｏｒｃｈ", "slice", "Tensor", "__class__", "_tj_k0", "isinstance", "self", "_", "float"]

    def edit(doc):
        for g, name in zip(doc["program"]["graphs"], hostile):
            g["arg_names"] = [name]
            g["param_names"] = [name]
            g["inputs"][0]["hint"] = name
    loaded = tracejit.load(io.BytesIO(rewrite(buf.getvalue(), edit_doc=edit)))
    x = torch.randn(3, 2, 6, 6)
    torch.testing.assert_close(loaded(x), net(x))
    for program in (traced, loaded):
        for _, m in program.named_modules():
            for fn in m._traced_methods.values():
                _check_names(fn.code)
    assert parse(buf.getvalue())[0]["program"]["graphs"][0]["arg_names"] == ["x"]


def test_save_refuses_what_load_would_refuse():
    """A program using an op the loader refuses fails at save, saying why, not at load."""
    traced = _quiet(lambda: tracejit.trace(lambda x: x.to_sparse().to_dense() * 2, torch.randn(3, 3)))
    x = torch.randn(4, 4)
    torch.testing.assert_close(traced(x), x * 2)      # running it in this process is fine
    with pytest.raises(tracejit.SaveError, match="to_sparse.*refuses"):
        tracejit.save(traced, io.BytesIO())
