"""Size rule of ``aten::_grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None)``: transformers' mixture of
experts (Mixtral, Qwen2-MoE: ``integrations/moe.py``) multiplies each expert's tokens by that expert's weights
in one call, the tokens sorted by expert and ``offs`` the cumulative token count per expert (int32).

Shapes (G groups, from ``offs`` or the 3-d operand's first size):

- 2-d x 3-d: ``[M, K] x [G, K, N] -> [M, N]``, rows ``offs[g-1]:offs[g]`` times ``mat2[g]`` (ragged M);
- 3-d x 2-d: ``[G, M, K] x [K, N] -> [M, N]``, columns split by ``offs`` (ragged N);
- 2-d x 2-d: ``[M, K] x [K, N] -> [G, M, N]``, the contraction split by ``offs`` (ragged K): the output can
  outgrow both inputs (G from ``offs``'s length);
- 3-d x 3-d: ``[G, M, K] x [G, K, N] -> [G, M, N]``, no ``offs``.

**Values the kernel trusts.** torch's CPU kernel checks ``offs``'s dtype, rank and length but not its values:
offsets past the ragged size read outside the operand, decreasing or negative ones index before it, and rows
(or columns) no group covers are left as uninitialised memory in the output (the process's old heap contents).
So ``offs`` must be non-decreasing, from 0, and end at the ragged size exactly (what the MoE computes: a
cumulative sum of counts of every token); checked before every call (a ValueError: GuardError at call time,
LoadError at load where ``offs`` is the file's own constant).
"""
from __future__ import annotations

import torch

from .op_sizes import _shape


def _groups_and_product(b):
    """``(output elements, multiply-adds, the ragged size or None)``, or None while a shape is unknown.
    Operands that do not fit (contraction sizes, group counts) are a ValueError here, before the kernel."""
    a, m, offs = _shape(b.get("self")), _shape(b.get("mat2")), b.get("offs")
    if a is None or m is None:
        return None
    g = _shape(offs)[0] if _shape(offs) else None
    if len(a) not in (2, 3) or len(m) not in (2, 3):
        return None   # the kernel refuses other ranks
    if a[-1] != m[-2]:
        raise ValueError(f"_grouped_mm's operands {list(a)} and {list(m)} do not share their contraction size")
    if (len(a) == 3) + (len(m) == 3) == 1 and g is not None and g != (a[0] if len(a) == 3 else m[0]):
        raise ValueError(f"_grouped_mm's offs has {g} groups, its 3-d operand {a[0] if len(a) == 3 else m[0]}")
    if len(a) == 3 and len(m) == 3 and a[0] != m[0]:
        raise ValueError(f"_grouped_mm's operands {list(a)} and {list(m)} hold different numbers of groups")
    if len(a) == 2 and len(m) == 3:
        return a[0] * m[2], a[0] * a[1] * m[2], a[0]
    if len(a) == 3 and len(m) == 2:
        return a[1] * m[1], a[1] * a[2] * m[1], m[1]
    if len(a) == 2 and len(m) == 2:
        return None if g is None else (g * a[0] * m[1], a[0] * a[1] * m[1] + g * a[0] * m[1], a[1])
    return a[0] * a[1] * m[2], a[0] * a[1] * a[2] * m[2], None


def _check_offsets(b, ragged) -> None:
    offs = b.get("offs")
    if not isinstance(offs, torch.Tensor) or offs.device.type == "meta" or ragged is None:
        return
    if offs.dim() != 1 or offs.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"_grouped_mm's offs must be a 1-d int32 tensor; got {offs.dtype} of shape "
                         f"{tuple(offs.shape)}")
    if not offs.numel():
        raise ValueError("_grouped_mm's offs is empty")
    if bool((offs[1:] < offs[:-1]).any()) or int(offs[0]) < 0:
        raise ValueError(f"_grouped_mm's offs must be non-decreasing from 0; got {offs.tolist()[:8]}")
    if int(offs[-1]) != ragged:
        raise ValueError(f"_grouped_mm's offs must end at the ragged size {ragged} (every row in a group); got "
                         f"{int(offs[-1])}")


def grouped_mm_elements(b):
    """The output's elements (``offs``'s values checked first when real)."""
    found = _groups_and_product(b)
    if found is None:
        return None
    _check_offsets(b, found[2])
    return found[0]


def grouped_mm_flops(b):
    found = _groups_and_product(b)
    return None if found is None else found[1]
