"""Size rules that the element counts of op_sizes*.py miss: a shape's *extent*, the pieces of a split, and
the argument values a kernel takes on trust (hostile-file round 19, docs/SECURITY.md).

- **Extent.** A tensor with a zero in its shape holds no element whatever its other sizes: ``x[:0]``
  viewed as ``[2**28, 0]`` is free, but a reduction over the zero (``.sum(1)``), a determinant of
  ``[n, 0, 0]``, ``mv`` by an empty vector or ``cosine_similarity`` over the empty dimension makes one
  element per position of the others: 2^28 from a 12-element input. So the budget measures a shape by its
  extent, the product of its sizes with each 0 counted as 1 (``call_budget.over_budget`` hands every size
  rule empty tensors at their extent), and the ops that make an empty tensor of a new shape from an empty
  one (``view``, ``reshape``, ``unflatten``, ``pixel_unshuffle``) have a rule: the extent they make. On a
  non-empty input they keep its elements (checked by the kernel), so generated code checks them only when
  the input is empty (``SizeRule.empty_only``).
- **Pieces.** ``tensor_split(x, 2**21)`` makes 2^21 tensors (1.4 GB of tensor objects) before the program
  unpacks them into the names its node declares (``unpack``), which then fails. A split may make at most
  ``unpack`` pieces: checked before the op (a file's constant at load, a traced size at each call).
- **Values.** ``div(INT64_MIN, -1, rounding_mode="trunc")`` kills the process with SIGFPE (int32 too);
  ``matrix_power(x, -2**63)`` negates n and loops for ever; ``binomial`` with a NaN count never returns;
  ``mvlgamma(x, p)`` makes p values per element; ``_weight_norm``'s fused kernel reads and writes ``v.size(dim)``
  values of ``g``'s size. Each is checked before the op runs (ValueError: a GuardError at call time, a LoadError at
  load).
"""
from __future__ import annotations

import math

import torch

from .op_sizes import _ints, _shape
from . import op_sizes_broadcast as several

INT64_MIN = -2 ** 63


def extent(shape) -> int:
    """The product of the sizes, each 0 counted as 1: what an op that drops the zero dimension can make."""
    return math.prod(max(int(s), 1) for s in shape)


def _real(t) -> bool:
    """A tensor with values to read (at call time; meta tensors at load have none)."""
    return isinstance(t, torch.Tensor) and t.device.type != "meta" and t.numel() > 0


# ---- shapes of empty tensors ------------------------------------------------------------------------------
def _elements(x):
    """The elements of a non-empty input shape (a reshape keeps them: the kernel checks), else None."""
    return math.prod(x) if x is not None and math.prod(x) > 0 else None


def reshaped(b):
    """view / reshape / view_copy to ``size``: the input's elements, or for an empty input the extent of the
    new shape (-1 counted as 1: an empty input cannot resolve it)."""
    sizes, kept = _ints(b.get("size", b.get("shape"))), _elements(_shape(b.get("self")))
    return kept if kept is not None else None if sizes is None else math.prod(max(abs(s), 1) for s in sizes)


def unflattened(b):
    """unflatten(self, dim, sizes): the other dimensions' extent times the new sizes'."""
    x, dim, sizes = _shape(b.get("self")), b.get("dim"), _ints(b.get("sizes"))
    if _elements(x) is not None:
        return _elements(x)
    if x is None or sizes is None or _ints(dim) is None or not -len(x) <= dim < max(len(x), 1):
        return None
    rest = [s for i, s in enumerate(x) if i != dim % max(len(x), 1)]
    return extent(rest) * math.prod(max(abs(s), 1) for s in sizes)


def pixel_unshuffled(b):
    """pixel_unshuffle by r: r^2 channels per channel, each spatial size divided by r (at most the input's
    extent times r^2)."""
    x, r = _shape(b.get("self")), b.get("downscale_factor")
    if _elements(x) is not None:
        return _elements(x)
    return None if x is None or _ints(r) is None else extent(x) * max(abs(r), 1) ** 2


# ---- pieces -----------------------------------------------------------------------------------------------
def _dim_size(x, dim):
    if x is None or _ints(dim) is None or not -len(x) <= dim < max(len(x), 1) or not x:
        return None
    return x[dim]


def _pieces(op: str, b):
    """How many tensors the split ``op`` returns with arguments ``b`` (an upper bound), or None: unknown yet."""
    x = _shape(b.get("self"))
    if op == "unbind":
        return _dim_size(x, b.get("dim", 0))
    if op in ("split", "split_with_sizes"):
        size = b.get("split_size", b.get("split_sizes"))
        if isinstance(size, (list, tuple)):
            return len(size)
        n = _dim_size(x, b.get("dim", 0))
        if n is None or _ints(size) is None:
            return None
        return max(-(-n // size), 1) if size > 0 else 1
    if op == "chunk":
        chunks, n = b.get("chunks"), _dim_size(x, b.get("dim", 0))
        return None if _ints(chunks) is None else chunks if n is None else min(chunks, max(n, 1))
    sections = b.get("sections", b.get("indices", b.get("tensor_indices_or_sections")))
    if isinstance(sections, (list, tuple)):
        return len(sections) + 1
    if isinstance(sections, torch.Tensor):
        if sections.dim():
            return sections.numel() + 1
        return int(sections) if sections.device.type != "meta" else None
    return None if _ints(sections) is None else sections


SPLITS = ("unbind", "split", "split_with_sizes", "chunk", "tensor_split", "hsplit", "vsplit", "dsplit")


def check_counts(op: str, b) -> None:
    """What the split kernels refuse, said before they run (round 21): ``chunks`` / ``sections`` of 0 or less,
    a negative ``split_size`` (or 0 for a non-empty dimension), ``split_sizes`` with a negative size or not
    summing to the dimension."""
    x = _shape(b.get("self"))
    n = _dim_size(x, b.get("dim", 0))
    if op == "chunk" and _ints(b.get("chunks")) is not None and b["chunks"] <= 0:
        raise ValueError(f"chunks {b['chunks']} must be positive")
    if op == "tensor_split":
        sections = b.get("sections")
        if _ints(sections) is not None and not isinstance(sections, (list, tuple)) and sections <= 0:
            raise ValueError(f"sections {sections} must be positive")
    if op in ("split", "split_with_sizes"):
        size = b.get("split_size", b.get("split_sizes"))
        sizes = _ints(size)
        if sizes is None:
            return
        if any(v < 0 for v in sizes):
            raise ValueError(f"split sizes {sizes} must be non-negative")
        if isinstance(size, (list, tuple)) and n is not None and sum(sizes) != n:
            raise ValueError(f"split sizes {sizes} must sum to the dimension's size {n}")
        if not isinstance(size, (list, tuple)) and size == 0 and n:
            raise ValueError(f"split size 0 of a dimension of size {n}")


def counted_rule(op: str):
    """The size rule of a split that is not unpacked: its counts checked; the pieces hold the input's elements."""
    def counted(b):
        check_counts(op, b)
        x = _shape(b.get("self"))
        return None if x is None else math.prod(x)
    return counted


def pieces_rule(op: str):
    def pieces(b):
        check_counts(op, b)
        n, want = _pieces(op, b), b.get("_tj_unpack")
        if n is not None and isinstance(want, int) and n > want:
            raise ValueError(f"it would make {n} tensors, and the program unpacks {want}")
        return None
    return pieces


# ---- values a kernel trusts ---------------------------------------------------------------------------------
def mvlgamma(b):
    """mvlgamma / special_multigammaln(self, p): p terms per element before their sum."""
    x, p = _shape(b.get("self")), b.get("p")
    return None if x is None or _ints(p) is None else extent(x) * max(abs(p), 1)


def matrix_power(b):
    """matrix_power(self, n): n = -2^63 cannot be negated (the kernel then never stops); the output is
    shaped like the input."""
    n = b.get("n")
    if _ints(n) is not None and n == INT64_MIN:
        raise ValueError(f"matrix_power's exponent {n} cannot be negated in 64 bits")
    x = _shape(b.get("self"))
    return None if x is None else extent(x)


def binomial(b):
    """binomial(count, prob): a NaN count never ends the sampler's loop; counts must be finite."""
    count = b.get("count")
    if _real(count) and not bool(torch.isfinite(count).all()):
        raise ValueError("binomial's counts must be finite (a NaN count makes the sampler loop for ever)")
    return several.broadcast_or_sum(b)


def weight_norm(b):
    """_weight_norm(v, g, dim): for ``dim`` 0 or the last one (and no half dtype) torch runs a fused CPU kernel that
    reads ``g`` and writes a norm buffer shaped like ``g`` at ``v.size(dim)`` positions without checking ``g``'s
    size (a 1-element ``g`` corrupted the heap): ``g`` must hold exactly ``v.size(dim)`` values there. Otherwise
    it is ``v * (g / norm)``, the broadcast of the two."""
    v, g, dim = b.get("v"), b.get("g"), b.get("dim", 0)
    vs, gs = _shape(v), _shape(g)
    if vs is None or gs is None or _ints(dim) is None:
        return None
    half = any(getattr(t, "dtype", None) == torch.float16 for t in (v, g))   # torch's own composite then
    if not half and vs and (dim == 0 or dim == len(vs) - 1) and math.prod(gs) != vs[dim]:
        raise ValueError(f"_weight_norm's g {list(gs)} must hold one value per slice of v {list(vs)} along dim "
                         f"{dim} ({vs[dim]})")
    return several.broadcast_or_sum(b)


_INT_MIN = {torch.int64: -2 ** 63, torch.int32: -2 ** 31}


def trunc_division(b):
    """div(a, b, rounding_mode="trunc") on int32 / int64: the smallest int divided by -1 traps (SIGFPE)."""
    a, d = b.get("self"), b.get("other")
    try:
        dtype = torch.result_type(a, d)
    except (TypeError, RuntimeError):
        return None
    low = _INT_MIN.get(dtype)
    if low is not None:
        has_min = bool((a == low).any()) if _real(a) else (a == low if isinstance(a, int) else False)
        minus_one = bool((d == -1).any()) if _real(d) else (d == -1 if isinstance(d, int) else False)
        if has_min and minus_one:
            raise ValueError(f"integer division of {low} by -1 (rounding_mode='trunc') overflows {dtype} and "
                             "kills the process")
    return several.broadcast_or_sum(b) if sum(isinstance(v, torch.Tensor) for v in (a, d)) == 2 else None
