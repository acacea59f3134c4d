"""Constants of the normalizations, checked against the input's shape before the kernel (hostile-file round 26).

A file's ``layer_norm`` / ``rms_norm`` whose normalized_shape is not the input's trailing sizes (or whose weight
is not shaped like it), and a ``group_norm`` whose num_groups does not divide the input's channels (or whose
weight is not one value per channel), loaded and raised the kernel's RuntimeError at the first call. Each rule
here raises ValueError instead: a LoadError at load (the traced shapes: op_checks.check_sizes) and a GuardError
naming the node's line at a call whose shape disagrees (support/call_budget.size_check). What they make is their
input's elements.

``call_test`` gives the generated code a cheap test of the real input (``if x.shape[-1:] != (768,):``, written with
the bound arguments' names, ``{input}``, ``{weight}``): the full
check runs only when that test says the kernel would refuse (or the constants are not known at load: then at every
call). Like op_sizes.py: shapes are tuples of ints, a size not known yet (a traced int at load) passes.
"""
from __future__ import annotations

import math

from .op_sizes import _ints, _shape


def _ints_of(v):
    s = _shape(v)
    return None if s is None else list(s)


def layer_normed(b):
    """layer_norm / rms_norm(input, normalized_shape, weight, bias): normalized_shape is the input's trailing
    sizes, weight and bias shaped like it."""
    x, ns = _shape(b.get("input")), _ints(b.get("normalized_shape"))
    if x is None:
        return None
    if ns is not None:
        if len(ns) > len(x) or list(x[len(x) - len(ns):]) != ns:
            raise ValueError(f"normalized_shape {ns} must be the input's last sizes, but the input is {list(x)}")
        for arg in ("weight", "bias"):
            w = _ints_of(b.get(arg))
            if w is not None and w != ns:
                raise ValueError(f"{arg} of shape {w} must be shaped like normalized_shape {ns}")
    return math.prod(x)


def group_normed(b):
    """group_norm(input, num_groups, weight, bias): num_groups divides the input's channels (dim 1), weight and
    bias hold one value per channel."""
    x, g = _shape(b.get("input")), b.get("num_groups")
    if x is None:
        return None
    if isinstance(g, int) and not isinstance(g, bool):
        if g <= 0:
            raise ValueError(f"num_groups {g} must be positive")
        if len(x) < 2 or x[1] % g:
            raise ValueError(f"the input's channels (dim 1 of {list(x)}) must be divisible by num_groups {g}")
        for arg in ("weight", "bias"):
            w = _ints_of(b.get(arg))
            if w is not None and math.prod(w) != x[1]:
                raise ValueError(f"{arg} of shape {w} must hold one value per channel of the input {list(x)}")
    return math.prod(x)


def _tensor_args(b: dict, constants: set) -> list:
    """The weight and bias a call passes as tensors (a test of theirs is written with their names)."""
    return [arg for arg in ("weight", "bias") if _shape(b.get(arg)) is not None]


def layer_norm_test(b: dict, constants: set):
    """``("input", test)``: the input's trailing sizes, and the weight's and bias's shapes, against a constant
    normalized_shape, else None."""
    ns = _ints(b.get("normalized_shape"))
    if ns is None or not ns:
        return None
    test = f"{{input}}.shape[-{len(ns)}:] != {tuple(ns)!r}"
    for arg in _tensor_args(b, constants):
        test += f" or {{{arg}}}.shape != {tuple(ns)!r}"
    return "input", test


def group_norm_test(b: dict, constants: set):
    """``("input", test)``: the input's rank and channels against a constant num_groups and the weight's and
    bias's counts, else None."""
    g = b.get("num_groups")
    if not isinstance(g, int) or isinstance(g, bool) or g <= 0:
        return None
    test = f"{{input}}.dim() < 2 or {{input}}.shape[1] % {g}"
    for arg in _tensor_args(b, constants):
        test += f" or {{{arg}}}.numel() != {{input}}.shape[1]"
    return "input", test
