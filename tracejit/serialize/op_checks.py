"""Argument checks for what an op's kernel trusts, run at load on a node's schema-bound arguments.

The schema check (schema_check.py) makes every argument the right kind; these check the values
kernels take on trust: enum-like ints in their range (grid sampling's interpolation and padding
modes, loss reductions), running statistics sized to the channels they normalize, and, for ops
whose output can outgrow their inputs, the elements they allocate at the traced sizes (op_sizes.py;
the same functions run again at call time, support/call_budget.py). Each op family of the
allow-list (op_allowlist.py) names its check; ``schema_only`` says the schema check suffices.
"""
from __future__ import annotations

import functools
import math

import torch

from ..errors import LoadError
from ..ir import Value
from ..support.call_budget import over_budget


def schema_only(name: str, bound: dict, at: str) -> None:
    """The generic schema check suffices (the family's review in op_allowlist.py says why)."""


def _enum(bound: dict, arg: str, allowed: range, at: str, meaning: str) -> None:
    v = bound.get(arg)
    if v is None or isinstance(v, Value):
        if isinstance(v, Value):
            raise LoadError(f"{at}: {arg} ({meaning}) must be a constant, not a value traced at call time")
        return
    if not isinstance(v, int) or isinstance(v, bool) or v not in allowed:
        raise LoadError(f"{at}: {arg} = {str(v)[:20]} is not a valid {meaning} (expected one of "
                        f"{list(allowed)})")


def grid_sampler(name: str, bound: dict, at: str) -> None:
    """interpolation_mode: 0 bilinear, 1 nearest, 2 bicubic (2-D only); padding_mode: 0 zeros,
    1 border, 2 reflection. Other values make the kernel return memory it never wrote."""
    x = bound.get("input")
    three_d = name.endswith("3d") or (isinstance(x, Value) and len(getattr(x.type, "shape", ())) == 5)
    _enum(bound, "interpolation_mode", range(2 if three_d else 3), at, "grid-sampling interpolation mode")
    _enum(bound, "padding_mode", range(3), at, "grid-sampling padding mode")


def loss(name: str, bound: dict, at: str) -> None:
    """reduction: 0 none, 1 mean, 2 sum (torch/nn/_reduction.py)."""
    _enum(bound, "reduction", range(3), at, "loss reduction")


def batch_norm(name: str, bound: dict, at: str) -> None:
    """Running statistics, weight and bias hold one value per channel (dim 1 of the input), and
    eval mode (training=False) needs running statistics."""
    training = bound.get("training", bound.get("use_input_stats"))
    if training is False and (bound.get("running_mean") is None or bound.get("running_var") is None):
        raise LoadError(f"{at}: batch normalization in eval mode without running_mean / running_var")
    x = bound.get("input")
    shape = getattr(getattr(x, "type", None), "shape", None)
    if shape is None or len(shape) < 2:
        return
    channels = shape[1]
    for arg in ("weight", "bias", "running_mean", "running_var"):
        t = bound.get(arg)
        tshape = getattr(getattr(t, "type", None), "shape", None)
        if tshape is not None and math.prod(tshape) != channels:
            raise LoadError(f"{at}: {arg} holds {math.prod(tshape)} values, but the input has {channels} channels")


def group_norm(name: str, bound: dict, at: str) -> None:
    g = bound.get("num_groups")
    if isinstance(g, int) and not isinstance(g, bool) and g <= 0:
        raise LoadError(f"{at}: num_groups = {g} must be positive")


def sized(name: str, bound: dict, at: str) -> None:
    """Ops whose output can outgrow their inputs: their size function (op_sizes.py) is the check,
    run by ``check_sizes`` at load and by the generated code at call time."""


@functools.lru_cache(maxsize=1024)
def _meta_tensor(shape: tuple, dtype) -> torch.Tensor:
    """A meta tensor of that shape and dtype, made once: a load asks for the same few (each node's traced
    tensors, at load and again by the call-time budget plan). Size functions only read them."""
    return torch.empty(shape, dtype=dtype, device="meta")


def meta_arguments(bound: dict) -> dict:
    """The bound arguments with every traced tensor replaced by a meta tensor of its traced shape
    (what a size function reads at load); traced ints stay Values (unknown until call time)."""
    def meta(v):
        t = getattr(v, "type", None) if isinstance(v, Value) else None
        if t is not None and hasattr(t, "shape"):
            return _meta_tensor(tuple(t.shape), t.dtype)
        if isinstance(v, (list, tuple)):
            return type(v)(meta(x) for x in v)
        return v
    return {k: meta(v) for k, v in bound.items()}


def check_sizes(rule, name: str, bound: dict, at: str, max_elements: int) -> None:
    """The elements and work the op asks for at the traced sizes must fit the budget calls are held
    to (support/call_budget.over_budget: the file's size, or a multiple of the op's largest tensor)."""
    try:
        why = over_budget(rule, meta_arguments(bound), max_elements)
    except ValueError as e:   # arguments the kernel would trust wrongly (op_sizes.rnn, op_sizes_values.py)
        raise LoadError(f"{at}: aten::{name}: {e}") from None
    except (ArithmeticError, TypeError, IndexError, RuntimeError) as e:
        raise LoadError(f"{at}: its arguments do not describe a valid aten::{name} ({type(e).__name__})") from None
    if why is not None:
        raise LoadError(f"{at}: aten::{name} at the traced sizes {why}")
