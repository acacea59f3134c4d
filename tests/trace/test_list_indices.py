"""Indexing with Python lists (``x[..., [-2], :]``: transformers' Falcon; ``x[:, :, perm]``: timm's CSATv2) is
recorded as ATen ops, as eager reads the list (torch's python_variable_indexing.cpp): a list inside a tuple is
one index tensor, a list as the whole index a tuple of indices when short and holding a sequence, slice, None or
``...``, else one index tensor. It was one ``tracejit::getitem`` node, which ``save`` refused ("indexes with a
Python object that cannot be saved as data"), and ONNX could not export. Each case: live, loaded and in
onnxruntime on new shapes, against eager."""
from __future__ import annotations

import importlib.util
import io
import warnings

import pytest
import torch

import tracejit

CASES = {
    "list_after_ellipsis": lambda x: x[..., [-2], :] * 3,
    "list_in_tuple": lambda x: x[:, [0, 2]].sum(1),
    "permutation": lambda x: x[:, :, [3, 1, 0, 2]],
    "whole_index_list": lambda x: x[[0, 0, 1]],
    "whole_index_list_with_slice": lambda x: x[[slice(None), [2, 1]]],
    "nested_list": lambda x: x[:, [[0, 1], [1, 2]]],
    "empty_list": lambda x: x[:, []] + 1,
    "bool_list": lambda x: x[:, [True, False, True]],
    "assignment": lambda x: _assign(x),
}


def _assign(x):
    y = x.clone()
    y[:, [0, 2]] = -1.0
    return y


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", sorted(CASES))
def test_list_index_traced_saved_and_exported(name):
    fn = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(fn, (_x(2, 3, 4),))
    assert "tracejit::getitem" not in str(traced.graph) and "tracejit::setitem" not in str(traced.graph)
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    programs = {"traced": traced, "loaded": tracejit.load(buf)}
    if importlib.util.find_spec("onnxruntime") is not None:
        programs["onnxruntime"] = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    for x in (_x(3, 3, 5, seed=1), _x(4, 3, 6, seed=2)):
        want = fn(x)
        for what, program in programs.items():
            got = program(x)
            assert got.shape == want.shape, f"{what}: {tuple(got.shape)}, eager {tuple(want.shape)}"
            torch.testing.assert_close(got, want, rtol=0, atol=0, msg=lambda m: f"{what}: {m}")
