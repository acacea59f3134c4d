"""``torch.tensor`` of a nested list holding traced sizes (transformers' Mask2Former: ``torch.tensor([[shape[1],
shape[0]] for shape in spatial_shapes_list])``) exports as the numbers concatenated and reshaped to the nesting the
trace fixed (export/special_ops.py). Before, the export refused it ("a nested list holding traced values"): no ONNX
backend for Mask2Former (breadth27). Eager's answers on new shapes."""
from __future__ import annotations

import pytest
import torch

import tracejit

ort = pytest.importorskip("onnxruntime")


def levels(x, y):
    shapes = [x.shape[2:], y.shape[2:]]
    table = torch.tensor([[s[1], s[0]] for s in shapes], dtype=torch.long)
    return x.flatten(2).sum(-1, keepdim=True) * table.sum() + table.float().prod() + table[1, 0]


def _run(proto, args):
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)})[0])


def test_nested_list_of_sizes_exports_with_eagers_answers():
    proto = tracejit.export_onnx(tracejit.trace(levels, (torch.randn(1, 2, 4, 6), torch.randn(1, 2, 3, 5))))
    for shapes in (((1, 2, 4, 6), (1, 2, 3, 5)), ((2, 2, 7, 3), (2, 2, 2, 9))):
        args = tuple(torch.randn(*s, generator=torch.Generator().manual_seed(s[2])) for s in shapes)
        torch.testing.assert_close(_run(proto, args), levels(*args))


def test_a_nested_list_mixing_sizes_and_numbers():
    x = torch.randn(3, 4)
    traced = tracejit.trace(lambda x: x * torch.tensor([[x.shape[0], 1], [2, x.shape[1]]]).sum(), x)
    proto = tracejit.export_onnx(traced)
    y = torch.randn(5, 2)
    torch.testing.assert_close(_run(proto, (y,)), y * torch.tensor([[5, 1], [2, 2]]).sum())
