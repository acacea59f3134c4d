"""numpy's argument names that torch takes for its own (``x.mean(axis=1, keepdims=True)``: IBert's layer norm).
The node held ``axis``, which binds to no schema of ``aten::mean``: save refused the program ("load would refuse
it"), while the live program ran. The recorder now spells them as torch's schemas do."""
from __future__ import annotations

import io

import torch

import tracejit


def numpy_spelled(x):
    centred = x - x.mean(axis=-1, keepdims=True)
    return centred / torch.std(centred, axis=-1, keepdim=True) + x.sum(axis=0)


def test_numpy_argument_names_trace_save_and_load():
    torch.manual_seed(0)
    traced = tracejit.trace(numpy_spelled, torch.randn(3, 6))
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    for shape in ((5, 6), (2, 11)):
        x = torch.randn(*shape)
        for program in (traced, loaded):
            torch.testing.assert_close(program(x), numpy_spelled(x), rtol=0, atol=0)
