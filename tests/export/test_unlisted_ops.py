"""ATen ops torch_lib does not list in recorded form (export/unlisted_ops.py): ``1 - x``, var / std
and their _mean forms, fmax / fmin, nan_to_num, sgn, ``x >> 1``, square, eye, ``x.T`` / ``x.H`` / ``x.adjoint()``. Each used to fail at export; each
gives eager's and torch.jit's trace's answers in onnxruntime and OpenVINO on new shapes and edges."""
from __future__ import annotations

import pytest
import torch

import tracejit

from backend_check import BACKENDS, assert_backends_match

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")

def _x(*shape, seed=0, edges=False):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 3
    if edges:
        flat = x.view(-1)
        flat[:4] = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0])
    return x


CASES = {   # name -> (fn, edges in the inputs?, backends)
    "rsub_scalar": (lambda x: 1 - x, False),
    "rsub_float_from_int": (lambda x: 1.5 - (x * 2).long(), False),
    "rsub_int": (lambda x: 3 - (x * 2).long(), False),
    "rsub_alpha": (lambda x: torch.rsub(x, x * 2, alpha=3), False),
    "var_dim": (lambda x: x.var(1), False),
    "var_biased_keepdim": (lambda x: x.var(-1, unbiased=False, keepdim=True), False),
    "var_correction": (lambda x: torch.var(x, dim=(0, 1), correction=0), False),
    "var_all": (lambda x: x.var(), False),
    "std_all": (lambda x: x.std(), False),
    "std_dim": (lambda x: x.std(0, keepdim=True), False),
    "var_mean": (lambda x: torch.var_mean(x, 1), False),
    "std_mean_correction": (lambda x: torch.std_mean(x, dim=1, correction=2), False),
    "fmax": (lambda x: torch.fmax(x, x.flip(-1)), True),
    "fmin": (lambda x: torch.fmin(x, x.flip(-1)), True),
    "nan_to_num": (lambda x: torch.nan_to_num(x), True),
    "nan_to_num_values": (lambda x: torch.nan_to_num(x, nan=-1.0, posinf=9.0, neginf=-9.0), True),
    "sgn": (lambda x: x.sgn(), True),
    "rshift": (lambda x: (x * 100).long() >> 2, False),
    "rshift_int32": (lambda x: (x * 100).int() >> 3, False),
    "broadcast_tensors": (lambda x: torch.broadcast_tensors(x[:, :1], x[:1])[0] * 2 + torch.broadcast_tensors(x[:1], x)[0], False),
    "adaptive_max_pool_values": (lambda x: torch.nn.functional.adaptive_max_pool2d(x[None], 1), False),
    "adaptive_max_pool_indices": (lambda x: torch.nn.functional.adaptive_max_pool2d(x[None, None], 1, return_indices=True), False),
    "median": (lambda x: x.median(), False),
    "square": (lambda x: torch.square(x) + torch.square((x > 0).long()), False),
    "T": (lambda x: x.T * 2 + x[:, :1].T, False),
    "H_and_adjoint": (lambda x: x.H + x.adjoint() + x[None].adjoint()[0], False),
    "eye_of_a_size": (lambda x: torch.eye(x.shape[1]) + x[:1, :1], False),
    "eye_rectangular_int": (lambda x: torch.eye(x.shape[0], x.shape[1], dtype=torch.int64) * 3 + torch.eye(2, 3)[0, 0].long(), False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gives_eager_and_jit_answers_on_new_shapes(name):
    fn, edges = CASES[name]
    example = (_x(3, 5, edges=edges),)
    new = [(_x(4, 9, seed=1, edges=edges),), (_x(2, 7, seed=2),)]
    assert_backends_match(fn, example, new, name, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_variance_of_too_few_elements_is_nan_or_inf_as_eager():
    """One element with correction 1: 0 / 0; two with correction 3: a sum over max(N - 3, 0)."""
    def f(x):
        return x.var(1), x.std(1, correction=3)
    with torch.no_grad():
        traced = tracejit.trace(f, (torch.randn(2, 4),))
        inputs = torch.tensor([[2.0], [5.0]]), torch.tensor([[1.0, 4.0], [3.0, 3.0]])
        assert f(inputs[0])[0].isnan().all() and f(inputs[0])[1].isnan().all()   # 0 / 0
        assert f(inputs[1])[1].tolist() == [float("inf"), float("nan")] or f(inputs[1])[1][0].isinf()   # x / 0
        for backend in BACKENDS:
            program = tracejit.optimize_for_inference(traced, backend=backend)
            for x in inputs:
                want = f(x)
                for w, g in zip(want, program(x)):
                    torch.testing.assert_close(g, w, equal_nan=True, msg=lambda m: f"{backend}: {m}")
