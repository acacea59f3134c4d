"""A method call whose tensor is not the schema's first argument: ``x.where(mask, y)`` is recorded as Python called
it, ``aten::where.self(x, mask, y)``, while the schema is ``where.self(condition, self, other)`` (the codegen calls
the method, so the torch program is right). The export bound the arguments by schema position: ``Where(x, mask, y)``,
the data as the condition: onnx.checker refused the model (transformers' Longformer, ``full_like(...).where(mask,
input)`` in ``_mask_invalid_locations``), or, with a condition-typed ``x``, another answer. Now the method's tensor
is moved to the schema's ``self`` place (export/schema_args.node_args)."""
from __future__ import annotations

import pytest
import torch

import tracejit

ort = pytest.importorskip("onnxruntime")


def masked(x, m):
    return torch.full_like(x, -1e4).where(m.bool(), x) + x.where(m > 0, 2 * x) + torch.where(m.bool(), x, -x)


def _inputs(rows, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 5, generator=g), (torch.rand(rows, 5, generator=g) > 0.5).long()


def test_method_where_exports_with_eagers_answer_on_new_shapes():
    proto = tracejit.export_onnx(tracejit.trace(masked, _inputs(3, 0)))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for rows, seed in ((3, 1), (7, 2), (1, 3)):
        x, m = _inputs(rows, seed)
        got = session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), (x, m))})[0]
        torch.testing.assert_close(torch.from_numpy(got), masked(x, m))
