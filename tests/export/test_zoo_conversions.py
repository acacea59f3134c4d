"""Conversions the bench zoo (bench/bench_zoo.py, issue #25 item 4) found missing or broken: each in
onnxruntime (and OpenVINO when installed) against eager and torch.jit's trace, on the example and on
new shapes."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from backend_check import assert_backends_match

import tracejit


@pytest.mark.parametrize("pool,shape,size,new_shapes", [
    (F.adaptive_avg_pool2d, (2, 3, 5, 7), (3, 4), [(4, 3, 9, 6), (1, 3, 3, 4)]),
    (F.adaptive_avg_pool2d, (1, 4, 2, 2), (7, 7), [(3, 4, 3, 5), (2, 4, 13, 8)]),   # AlexNet / VGG on small images
    (F.adaptive_avg_pool2d, (2, 3, 6, 6), (1, 3), [(2, 3, 5, 11)]),
    (F.adaptive_avg_pool1d, (2, 4, 9), (4,), [(3, 2, 14), (1, 4, 3)]),
    (F.adaptive_avg_pool3d, (1, 2, 5, 6, 7), (2, 3, 4), [(2, 2, 7, 3, 9)]),
])
def test_adaptive_avg_pool_to_any_size(pool, shape, size, new_shapes):
    def fn(x):
        return pool(x, size) * 2

    gen = torch.Generator().manual_seed(len(shape))
    example = (torch.randn(shape, generator=gen),)
    new = [(torch.randn(s, generator=gen),) for s in new_shapes]
    assert not torch.equal(fn(*new[0]).flatten()[:4], fn(*example).flatten()[:4])
    assert_backends_match(fn, example, new, f"adaptive pool {size}", rtol=1e-5, atol=1e-6)


def test_adaptive_avg_pool_bins_follow_the_input_size():
    """The bins are computed from the run-time size: 5 -> 3 bins [0,2) [1,4) [3,5), 7 -> [0,3) [2,5) [4,7)."""
    traced = tracejit.trace(lambda x: F.adaptive_avg_pool1d(x, 3), torch.randn(1, 1, 5))
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    x = torch.arange(7.0).reshape(1, 1, 7)
    torch.testing.assert_close(program(x), torch.tensor([[[1.0, 3.0, 5.0]]]))


def test_mask_filled_through_slices_without_a_traced_result():
    """torchvision Swin's shifted-window mask: ``mask[h0:h1, w0:w1] = count`` (fill_ on a slice, no output
    used) in a tensor made from sizes; the written values reach the readers."""
    def fn(x):
        mask = x.new_zeros(x.shape[-2], x.shape[-1])
        count = 0
        for h in (slice(0, -2), slice(-2, None)):
            for w in (slice(0, -1), slice(-1, None)):
                mask[h, w] = count
                count += 1
        return x + mask

    example = (torch.randn(2, 4, 5),)
    assert_backends_match(fn, example, [(torch.randn(3, 6, 7),), (torch.randn(1, 3, 3),)], "slice fill")


def test_tensor_of_a_python_number():
    """DeBERTa-v2's ``torch.tensor((max_position - 1) / mid)`` and ``torch.tensor(mid - 1)``."""
    def fn(x):
        a = torch.tensor(31 / 8)
        b = torch.tensor(7).type_as(x)
        c = torch.tensor(True)
        return torch.where(c, x * torch.log(a), b), torch.tensor(3) + x.shape[0]

    assert_backends_match(fn, (torch.randn(2, 3),), [(torch.randn(5, 4),)], "torch.tensor(number)")


def test_threshold():
    """``nn.Threshold`` / ``F.threshold`` (and its in-place form on a fresh tensor): ``value`` where
    ``x <= threshold``, else ``x``; a value at the threshold is replaced, a NaN stays NaN (as torch's kernel)."""
    def fn(x):
        y = F.threshold(x, 0.25, -3.0)
        return y, F.threshold(x * 2, 0.5, 7, inplace=True)

    def inputs(*shape, seed, dtype=torch.float32):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
        x.view(-1)[:3] = torch.tensor([0.25, float("nan"), 0.2500001], dtype=dtype)
        return (x,)

    example, new = inputs(2, 5, seed=0), [inputs(4, 9, seed=1), inputs(1, 3, seed=2)]
    assert not torch.equal(fn(*new[1])[0], new[1][0]) and (fn(*new[1])[0] == -3.0).any()
    assert_backends_match(fn, example, new, "threshold", rtol=0, atol=0, equal_nan=True)
    program = tracejit.optimize_for_inference(tracejit.trace(fn, inputs(2, 5, seed=0, dtype=torch.float64)),
                                              backend="onnxruntime")   # float64: OpenVINO refuses it
    x = inputs(3, 4, seed=3, dtype=torch.float64)
    for got, want in zip(program(*x), fn(*x), strict=True):
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
