"""What the CUDA test modules share: the device they run on, their skip mark, and tolerances.

On a machine without CUDA they skip. ``TRACEJIT_CUDA_TESTS_ON=cpu`` runs their logic on the CPU instead
(a dry run of the tests themselves before a GPU session: the device-specific assertions, such as device
syncs, are skipped there with a reason), never in CI.
"""
from __future__ import annotations

import os

import pytest
import torch

DRY_DEVICE = os.environ.get("TRACEJIT_CUDA_TESTS_ON")
DEVICE = torch.device(DRY_DEVICE or "cuda")
ON_CUDA = DEVICE.type == "cuda"

needs_cuda = pytest.mark.skipif(DRY_DEVICE is None and not torch.cuda.is_available(),
                                reason="no CUDA device here (torch.cuda.is_available() is False); "
                                       "tests/device/test_device_logic.py covers device logic with meta tensors")
real_cuda_only = pytest.mark.skipif(not ON_CUDA, reason=f"a dry run on {DEVICE}: needs a real CUDA device")


def on(device, tensors):
    """``tensors`` (a tuple) moved to ``device``."""
    return tuple(t.to(device) for t in tensors)


def no_tf32():
    """fp32 without TF32 (matmul and cuDNN), so programs and eager agree to float32 rounding; returns a restore."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False

    def restore():
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    return restore


def cpu_only_kernels(graph) -> list:
    """The kernel nodes of ``graph`` that are not CUDA ones (cuDNN's fused convs, passes/cuda_conv_kernels.py; linears
    as "nn" GEMMs, passes/cuda_linear_kernels.py): numpy, numexpr and oneDNN kernels have no business in a CUDA program."""
    return [n.attrs["ops"] for n in graph.nodes if n.op == "tracejit::kernel"
            and not n.attrs["ops"].startswith(("cudnn:", "cuda:"))]
