"""Real models traced on CUDA (issue 23): bench/zoo_models.py's torchvision and transformers models, random
weights, traced on the GPU at batch 2 and called on other batch sizes and image sizes / sequence lengths:
the traced program, ``optimize_for_inference`` (never a CPU-only kernel on CUDA) and its CUDA-graph backend
give eager's answers on the same device; a program traced on the CPU and moved to the GPU does too, and a
file saved from the GPU loads onto the CPU with the CPU eager answers.

Skipped without CUDA. ``TRACEJIT_CUDA_ZOO=all`` takes every zoo model (default: one per family).
"""
from __future__ import annotations

import io
import os
import re
import sys
import warnings

import pytest
import torch

import tracejit

from cuda_case import DEVICE, cpu_only_kernels, needs_cuda, no_tf32, on

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))
from zoo_models import ZOO  # noqa: E402

pytestmark = [needs_cuda, pytest.mark.filterwarnings("ignore::tracejit.TracerWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

FAMILIES = ("resnet18", "mobilenet_v3_small", "efficientnet_b0", "convnext_tiny", "densenet121", "vit_tv",
            "swin_tv", "deeplabv3_mobilenet", "regnet_x_400mf", "fasterrcnn_mobilenet", "retinanet_resnet50",
            "maskrcnn_resnet50", "bert", "gpt2", "llama", "t5", "bart",
            "deberta_v2", "wav2vec2", "whisper_encoder", "segformer")
MODELS = tuple(ZOO) if os.environ.get("TRACEJIT_CUDA_ZOO") == "all" else FAMILIES
TRACED_TOL, OPTIMIZED_TOL = 1e-4, 1e-3   # largest difference over the largest eager magnitude (at least 1)
# Mask R-CNN's masks are probabilities pasted at box pixel sizes: batch-norm folding's last-bit changes move
# them by up to 4.7e-3 on an H200 (2.1e-3 on the CPU; jit freeze's own distance on the CPU zoo: 2.3e-2, issue 25)
OPTIMIZED_TOL_OF = {"maskrcnn_resnet50": 1e-2}


@pytest.fixture(autouse=True)
def _fp32():
    restore = no_tf32()
    yield
    restore()


def _flat(out) -> list:
    return [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]


def _assert_eager(got, want, tol: float, what: str) -> None:
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want), f"{what}: {len(got)} outputs, eager gave {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.device == w.device, f"{what}: output {i} on {g.device}, eager's on {w.device}"
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what}: output {i} {g.dtype}{tuple(g.shape)}, eager " \
                                                          f"{w.dtype}{tuple(w.shape)}"
        if w.numel() == 0:
            continue
        if not w.is_floating_point():
            assert torch.equal(g, w), f"{what}: output {i} (integers) differs from eager"
            continue
        scale = max(1.0, w.abs().max().item())
        err = (g.float() - w.float()).abs().max().item() / scale
        assert err <= tol, f"{what}: output {i} differs from eager by {err:.2e} of its scale (tolerance {tol:.0e})"


_BUILT: dict = {}


def _model(name: str):
    """(model on the GPU, make(batch, new) giving GPU inputs, the CPU model), built once per name."""
    if name not in _BUILT:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                cpu_model, make = ZOO[name]()
            except RuntimeError as e:   # torchvision missing
                pytest.skip(str(e))
        import copy
        gpu_model = copy.deepcopy(cpu_model).to(DEVICE)
        _BUILT[name] = gpu_model, (lambda batch, new=False: on(DEVICE, make(batch, new))), cpu_model, make
    return _BUILT[name]


def _detector(name: str) -> bool:
    return "rcnn" in name or "retinanet" in name


def _calls(make, name=""):
    if _detector(name):   # a detector's batch is a list of images: its length is part of the traced structure
        return {"other size": make(2, True), "other values": (make(2)[0].flip(-1),)}
    return {"batch 3": make(3), "batch 1, other size": make(1, True)}


@pytest.mark.parametrize("name", MODELS)
def test_traced_on_cuda_gives_eagers_answers_on_new_shapes(name):
    model, make, cpu_model, cpu_make = _model(name)
    with torch.no_grad():
        traced = tracejit.trace(model, make(2), check_trace=False)
        for what, args in _calls(make).items():
            _assert_eager(traced(*args), model(*args), TRACED_TOL, f"{name} traced on cuda, {what}")
        optimized = tracejit.optimize_for_inference(traced)
        graph = optimized.forward.run_graph if hasattr(optimized, "forward") and hasattr(optimized.forward, "run_graph") \
            else None
        if graph is not None and DEVICE.type != "cpu":   # (a dry run on the CPU may choose them)
            assert cpu_only_kernels(graph) == [], "a CPU-only kernel on CUDA"
        for what, args in _calls(make).items():
            _assert_eager(optimized(*args), model(*args), OPTIMIZED_TOL_OF.get(name, OPTIMIZED_TOL),
                          f"{name} optimized on cuda, {what}")
        buf = io.BytesIO()
        tracejit.save(traced, buf)
        buf.seek(0)
        on_cpu = tracejit.load(buf, map_location="cpu")
        args = cpu_make(3)
        _assert_eager(on_cpu(*args), cpu_model(*args), TRACED_TOL, f"{name} saved on cuda, loaded onto the cpu")


@pytest.mark.parametrize("name", MODELS)
def test_cuda_graphs_give_eagers_answers_on_new_shapes(name):
    model, make, _, _ = _model(name)
    with torch.no_grad():
        traced = tracejit.trace(model, make(2), check_trace=False)
        program = tracejit.optimize_for_inference(traced, backend="cuda_graphs")
        calls = _calls(make, name)
        answered = 0
        for what, args in [*calls.items(), (f"{next(iter(calls))} again", next(iter(calls.values())))]:
            try:
                got = program(*args)
            except tracejit.GuardError as e:
                # a detector's pasted mask sizes follow its boxes (roi_heads.py's int(box)): with no original to
                # retrace, other boxes are a GuardError naming that line, never a wrong answer
                assert _detector(name) and re.search(r"\.py:\d+ `", str(e)), str(e)[:300]
                continue
            _assert_eager(got, model(*args), OPTIMIZED_TOL_OF.get(name, OPTIMIZED_TOL), f"{name} cuda graphs, {what}")
            answered += 1
    print(f"{name}: cuda_graphs stats {program.stats}; not captured: {program.not_captured or '-'}")
    # (Mask R-CNN pastes each mask at its box's pixel size: every other image is such a GuardError)
    assert answered >= 2 or _detector(name), f"{name}: {answered} of 3 calls answered"
    if _detector(name):   # value guards (the boxes decide the shapes) keep a detector out of graphs
        return
    # every other zoo model's guards are decided by the signature: config attributes, dense-tensor metadata
    # (a global guard had kept every transformers model, ViT and Swin out of graphs: session 35)
    assert program.not_captured == "", f"{name}: {program.not_captured}"
    assert program.stats["replays"] == 3 and program.stats["failed_captures"] == 0, f"{name}: {program.stats}"


@pytest.mark.parametrize("name", ("resnet18", "bert", "gpt2", "fasterrcnn_mobilenet"))
def test_traced_on_the_cpu_runs_on_cuda_after_to(name):
    model, make, cpu_model, cpu_make = _model(name)
    with torch.no_grad():
        traced = tracejit.trace(cpu_model, cpu_make(2), check_trace=False)
        traced.to(DEVICE)
        for what, args in _calls(make).items():
            _assert_eager(traced(*args), model(*args), TRACED_TOL, f"{name} traced on the cpu, run on cuda, {what}")


@pytest.mark.parametrize("name", ("resnet18", "bert"))
def test_gradients_on_cuda_equal_eagers(name):
    model, make, _, _ = _model(name)
    args = make(3)
    traced = tracejit.trace(model, make(2), check_trace=False)
    params = dict(model.named_parameters())

    def grads(fn):
        for p in params.values():
            p.grad = None
        out = _flat(fn(*args))
        sum(o.float().square().mean() for o in out if o.is_floating_point()).backward()
        got = {n: p.grad.clone() for n, p in params.items() if p.grad is not None}
        for p in params.values():
            p.grad = None
        return got

    want, got = grads(model), grads(traced)
    assert want and set(got) == set(want)
    for n in want:
        scale = max(1.0, want[n].abs().max().item())
        assert (got[n] - want[n]).abs().max().item() <= 1e-4 * scale, f"{name}: gradient of {n}"
