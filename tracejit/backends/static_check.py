"""The first answer of an OpenVINO model compiled for fixed input shapes, checked against the traced program.

OpenVINO compiles the traced shapes (and shapes a server calls again) into a model of fixed sizes, which its CPU
plugin optimizes further than the dynamic one. On transformers' TimeSformer (breadth27) that model answered 1.3e-3
from eager at the traced shape (scale 3.6: three elements in four off by more than 1e-5), where the dynamic model
(7e-7) and onnxruntime (2e-6) were right: an OpenVINO fusion, gone when the intermediates were made outputs. So the
first call of each such shape is also answered by the traced program (torch, eager's ops); where the two differ by
more than ``REL`` of the answer's scale (reassociation moves a float32 answer by ~1e-7 of it), the fixed-shape model
is dropped for those shapes for good (the dynamic one serves them), a TracerWarning says so, and the call gets the
traced program's answer. One traced-program run per compiled shape set; later calls pay nothing.
"""
from __future__ import annotations

import warnings

import torch

from .. import pytree
from ..errors import TracerWarning

REL = 1e-5   # of max(1, the largest finite |value| of the traced program's answer)


def agrees(got, want) -> bool:
    """Do two answers (same structure) agree within ``REL`` (floats) / exactly (the rest)?"""
    a, b = pytree.flatten(got)[0], pytree.flatten(want)[0]
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if not isinstance(y, torch.Tensor):
            if x != y:
                return False
            continue
        if not isinstance(x, torch.Tensor) or x.shape != y.shape or x.dtype != y.dtype:
            return False
        if not y.is_floating_point():
            if not torch.equal(x, y):
                return False
            continue
        finite = y[torch.isfinite(y)]
        scale = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
        if not torch.allclose(x, y, rtol=0.0, atol=REL * scale, equal_nan=True):
            return False
    return True


def first_answer(program, shapes: tuple, answer, args, kwargs):
    """``answer`` (of ``program``'s model compiled for ``shapes``), checked once per shape set against the traced
    program: the traced program's answer where they differ (``program.drop_static(shapes)`` then)."""
    with torch.no_grad():
        want = program.reference(*args, **kwargs)
    if agrees(answer, want):
        program.static_checked.add(shapes)
        return answer
    program.drop_static(shapes)
    program.handed_over += 1   # this call's answer is the traced program's
    warnings.warn(TracerWarning(f"{program.signature}: OpenVINO's model compiled for the input shapes {list(shapes)} "
                                "answered otherwise than the traced program (beyond float reassociation); its model "
                                "with dynamic shapes serves these shapes from now on"), stacklevel=3)
    return want
