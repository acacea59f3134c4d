"""Conversions torch_lib gets wrong (export/torch_lib_fixes.py), found by bench/serve_corpus19.py on models
outside the zoo, traced at batch 1 and run at batch 2.

``repeat_interleave`` by a traced size: GCViT repeats its global query once per window
(``q_global.repeat_interleave(B // q_global.shape[0], dim=0)``); torch_lib's ONNX failed with "invalid
expand shape" as soon as the repeated axis was not 1 (any batch but the traced one). ``linspace``:
torch_lib's conversion failed for every call (torchvision's RAFT: ``torch.linspace(-r, r, 2 * r + 1)``)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import tracejit

from backend_check import assert_backends_match

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def per_window(x, q):
    """GCViT's global query: one per image, repeated for each of the image's windows."""
    windows = x.reshape(-1, 4, x.shape[-1])
    return windows + q.repeat_interleave(windows.shape[0] // q.shape[0], dim=0)


CASES = {   # name -> (fn, example, new inputs: another batch, other sizes)
    "per_window": (per_window, (_x(1, 8, 6), _x(1, 4, 6)),
                   [(_x(2, 8, 6, seed=1), _x(2, 4, 6, seed=2)), (_x(3, 12, 6, seed=3), _x(3, 4, 6, seed=4))]),
    "flattened": (lambda x: x.repeat_interleave(x.shape[0]) * 2, (_x(1, 3),), [(_x(2, 3, seed=1),), (_x(4, 5, seed=2),)]),
    "negative_dim": (lambda x: x.repeat_interleave(x.shape[0], dim=-2), (_x(1, 3, 2),),
                     [(_x(2, 3, 2, seed=1),), (_x(3, 2, 5, seed=2),)]),
    "last_dim": (lambda x: x.repeat_interleave(x.shape[1], dim=-1), (_x(2, 1),), [(_x(2, 3, seed=1),)]),
    "python_count": (lambda x: x.repeat_interleave(2, dim=1), (_x(1, 3),), [(_x(2, 5, seed=1),)]),
}

LINSPACE = {   # name -> (fn of x (2-d), eager's bits?); the example is 2 x 7, the new inputs 3 x 9 and 1 x 1
    "numbers": (lambda x: x[:, :1] + torch.linspace(-4, 4, 9), True),
    "numbers_int": (lambda x: x[:, :1] * torch.linspace(-3, 7.9, 5, dtype=torch.int64), True),
    # torch's kernel contracts its multiply-adds (FMA) and vectorizes across the halfway point: an ulp apart
    "traced_steps": (lambda x: x * torch.linspace(-1, 1, x.shape[-1]), False),
    "traced_end": (lambda x: torch.linspace(0.5, x.shape[0] * 1.5, 6) + x[:1, :1], False),
    "traced_end_int": (lambda x: torch.linspace(-2, x.shape[1] + 0.7, 4, dtype=torch.int64) * x.shape[0], True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_repeat_interleave_gives_eager_answers_on_new_shapes(name):
    fn, example, new = CASES[name]
    assert_backends_match(fn, example, new, name, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(LINSPACE))
def test_linspace_gives_eager_answers_on_new_shapes(name):
    fn, exact = LINSPACE[name]
    tolerance = 0 if exact else 1e-6
    assert_backends_match(fn, (_x(2, 7),), [(_x(3, 9, seed=1),), (_x(1, 1, seed=2),)], name,
                          rtol=tolerance, atol=tolerance)


def test_exported_file_runs_at_another_batch():
    """The .onnx file itself (dynamic axes), not only the backend's session, at a batch it was not traced at."""
    with torch.no_grad():
        traced = tracejit.trace(per_window, (_x(1, 8, 6), _x(1, 4, 6)))
    session = ort.InferenceSession(tracejit.export_onnx(traced).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    x, q = _x(2, 8, 6, seed=5), _x(2, 4, 6, seed=6)
    got, = session.run(None, {"x": x.numpy(), "q": q.numpy()})
    np.testing.assert_array_equal(got, per_window(x, q).numpy())
