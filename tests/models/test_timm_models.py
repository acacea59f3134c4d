"""timm's models that issue #25 found slow, inexact or not exportable, small instances (random weights, BatchNorm
statistics randomised, 56-64 pixel images): the optimized program and the onnxruntime one give eager's answer
on NEW inputs (another batch; another image size where the model takes one), as closely as torch.jit's freeze
does on the same inputs (zoo_check.check). What broke: LeViT (``reshape_as``), NFNet (its weight-standardised
convs call ``F.batch_norm(training=True)`` without running statistics), GhostNet (``add_`` on a slice), MaxViT
(``swapaxes``), Swin (``fill_`` on a slice); PVT-v2, EVA02, XCiT and EdgeNeXt ran slower than eager. After a
retrace on another image size, the optimized MobileViT-v2 and ViT-tiny keep both specializations.

timm comes from the folder ``make test`` installs torchvision in (it imports torchvision); the tests skip
without it. bench/zoo_models.py times the same models (bench_zoo.py).
"""
from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch

import tracejit

from zoo_check import check, needs_onnx, randomise_batch_norm, torchvision_or_skip

pytestmark = [needs_onnx, pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")]


def _timm():
    torchvision_or_skip()   # timm imports torchvision
    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm is not installed (make test installs it)")
    import timm
    return timm


def _model(name: str, **kwargs):
    timm = _timm()
    torch.manual_seed(0)
    return randomise_batch_norm(timm.create_model(name, pretrained=False, num_classes=10, **kwargs))


def _images(*shapes, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(*shape, generator=gen),) for shape in shapes]


# name, create_model options, example size, new image size (None: the model fixes its size, the batch moves)
CASES = [
    ("levit_128s", {"img_size": 64}, 64, None),
    ("nfnet_l0", {}, 64, 96),
    ("ghostnet_100", {}, 64, 96),
    ("swin_tiny_patch4_window7_224", {"img_size": 56, "window_size": 7, "depths": (2, 2, 2, 2)}, 56, None),
    ("efficientnet_b0", {}, 64, 96),
    ("pvt_v2_b0", {}, 64, 96),
    ("eva02_tiny_patch14_224", {"img_size": 56, "depth": 2}, 56, None),
    ("xcit_nano_12_p16_224", {"img_size": 64, "depth": 2}, 64, 96),
    ("edgenext_xx_small", {}, 64, 96),
    pytest.param("maxvit_tiny_tf_224", {"img_size": 64, "depths": (1, 1, 1, 1)}, 64, None, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("name, options, size, new_size", CASES)
def test_timm_model_optimized_and_exported_on_new_inputs(name, options, size, new_size):
    model = _model(name, **options)
    example, = _images((1, 3, size, size))
    other = new_size or size
    check(model, example, _images((3, 3, other, other), (2, 3, size, size), seed=1))


@pytest.mark.parametrize("name, options, sizes", [
    ("mobilevitv2_050", {}, (64, 96)),
    ("vit_tiny_patch16_224", {"img_size": 64, "dynamic_img_size": True}, (64, 96)),
])
def test_optimized_program_keeps_the_specialization_a_retrace_made(name, options, sizes):
    """Traced on one image size, called on another (the traced program retraces: a second specialization), then
    optimized: both the optimized and the onnxruntime program answer on both sizes, the example's included."""
    model = _model(name, **options)
    first, second = _images((1, 3, sizes[0], sizes[0]), (1, 3, sizes[1], sizes[1]), seed=2)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, first)
        assert len(traced.specializations) == 1
        torch.testing.assert_close(traced(*second), model(*second))   # the retrace
        assert len(traced.specializations) == 2
        programs = {"optimized": tracejit.optimize_for_inference(traced),
                    "onnxruntime": tracejit.optimize_for_inference(traced, backend="onnxruntime")}
        for inputs in (first, second, *_images((2, 3, sizes[1], sizes[1]), seed=3)):
            want = model(*inputs)
            for label, program in programs.items():
                torch.testing.assert_close(program(*inputs), want, rtol=1e-4, atol=1e-4,
                                           msg=lambda m, label=label: f"{name} {label} on {tuple(inputs[0].shape)}: {m}")
