"""torch_lib functions called the way they are written: scripted functions with attributes (softplus,
hardtanh, amax, round(decimals)), trace-only functions that read Python values (argmax's dim,
div's rounding_mode) or use arithmetic on values (trunc, atan2). Each used to fail at export; each
now gives eager's and torch.jit's trace's answers in onnxruntime and OpenVINO, on new shapes."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tracejit

from backend_check import BACKENDS, assert_backends_match

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")

def _values(*shape, seed=0):
    """Signed values with exact halves and zeros (rounding, truncation and division edges)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * 4
    flat = x.view(-1)
    flat[:6] = torch.tensor([-2.5, 2.5, -0.0, 0.0, -7.0, 7.0])[: flat.numel()]
    return x


CASES = {
    "softplus": lambda x: F.softplus(x),
    "softplus_beta_threshold": lambda x: F.softplus(x, beta=2.0, threshold=3.0),
    "hardtanh": lambda x: F.hardtanh(x),
    "hardtanh_bounds": lambda x: F.hardtanh(x, -2.0, 0.5),
    "amax_dim": lambda x: x.amax(1),
    "amax_keepdim": lambda x: x.amax(-1, keepdim=True),
    "round_decimals": lambda x: (x * 1.37).round(decimals=1),
    "argmax_dim": lambda x: x.argmax(1),
    "argmin_keepdim": lambda x: x.argmin(0, keepdim=True),
    "div_floor": lambda x: torch.div(x, 3, rounding_mode="floor"),
    "div_trunc": lambda x: torch.div(x, -3, rounding_mode="trunc"),
    "div_floor_int": lambda x: torch.div(x.long(), 3, rounding_mode="floor"),
    "div_trunc_int_tensor": lambda x: torch.div((x * 10).long(), x.long().abs() + 2, rounding_mode="trunc"),
    "trunc": lambda x: x.trunc(),
    "atan2": lambda x: torch.atan2(x, x.flip(-1)),
}


def test_atan2_on_signed_zeros_infinities_and_nan():
    """torch_lib's atan2 gave 0 for NaN and inf / inf and +0 for -0.0's angles; eager's are exact."""
    def f(y, x):
        return torch.atan2(y, x)
    edge = torch.tensor([0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"), 3.0])
    y, x = torch.meshgrid(edge, edge, indexing="ij")
    y, x = y.reshape(-1), x.reshape(-1)
    want = f(y, x)
    assert want.isnan().any() and (want == torch.pi).any() and (want == -torch.pi).any()
    assert torch.signbit(want[(y == 0) & (x > 0) & torch.signbit(y)]).all()   # atan2(-0, +x) == -0
    with torch.no_grad():
        traced = tracejit.trace(f, (torch.randn(5), torch.randn(5)))
        reference = torch.jit.trace(f, (torch.randn(5), torch.randn(5)))
        for backend in BACKENDS:
            got = tracejit.optimize_for_inference(traced, backend=backend)(y, x)
            torch.testing.assert_close(got, want, rtol=1e-6, atol=0, equal_nan=True, msg=lambda m: f"{backend}: {m}")
            numbers = ~want.isnan()   # (a NaN's sign bit is not specified)
            assert torch.equal(torch.signbit(got[numbers]), torch.signbit(reference(y, x)[numbers])), backend


@pytest.mark.parametrize("name", sorted(CASES))
def test_gives_eager_and_jit_answers_on_new_shapes(name):
    fn = CASES[name]
    example, new = (_values(3, 5),), [(_values(4, 9, seed=1),), (_values(2, 6, seed=2),)]
    assert not torch.equal(fn(example[0]), fn(_values(3, 5, seed=3)))   # the inputs move the output
    assert_backends_match(fn, example, new, name, rtol=1e-5, atol=1e-6)
