"""Where a column slice of a product may stand for a linear's own result (passes/cuda_sibling_linears.py: bfloat16
and float16 siblings as one GEMM whose results are column slices).

A slice holds the same values as the linear's result with other strides: its rows lie as far apart as the whole
product is wide. Values never depend on strides, but a ``view`` does: it refuses a shape that merges the last dim
with another. So every reader must be proven safe, default-deny, and only this chain is (a transformer's heads,
BERT's ``x.view(b, s, -1, d).transpose(1, 2)`` into ``scaled_dot_product_attention``):

* the slice is read by ``size``, dtype and device reads, guards on those or the rank, and ``view``\\ s whose
  shape keeps each leading dim (read as ``size(x, i)`` of the linears' input or of the slice) and splits the last
  one into ``(-1 or n // d, d)`` or ``(h, -1)``; one leading dim may be ``-1`` where the last two are explicit
  and make ``n`` (T5's ``view(b, -1, heads, d)``: the ``-1`` can then only be that dim);
* such a view is read by those, ``scaled_dot_product_attention`` (query, key or value), and
  ``transpose`` / ``permute`` read only by those, by ``matmul`` (T5's ``q @ k.transpose(3, 2)``) or by another
  transpose / permute (two deep).

Nothing else may read them (a graph output neither): an elementwise op would hand the strides on to a tensor that
anything may read.
"""
from __future__ import annotations

from ..ir import Value
from ..ops.names import DEVICE_OF, DIM_ORDER_VIEWS, DTYPE_OF, GUARD, SIZE_READS

SIZE = "aten::size.int"
STRIDE_BLIND = (*SIZE_READS, DTYPE_OF, DEVICE_OF)   # reads that no stride changes
STRIDE_BLIND_TESTS = ("dim", "dtype", "device")
VIEW = "aten::view.default"
ATTENTION = "aten::scaled_dot_product_attention.default"
REARRANGE = DIM_ORDER_VIEWS
MATMUL = "aten::matmul.default"   # any strides: it copies where its kernel needs to; the result is a new tensor


def slice_safe(result: Value, source: Value, readers: dict) -> bool:
    """May a column slice stand for ``result`` (the output of a linear of ``source``)? ``readers``:
    kernel_chains.readers_of."""
    for reader in readers.get(id(result), [None]):
        if _harmless(reader):
            continue
        if reader is None or reader.op != VIEW or not _splits_last_dim(reader, result, source):
            return False
        if not all(_harmless(r) or _attention(r, reader.outputs[0]) or _rearranged(r, readers)
                   for r in readers.get(id(reader.outputs[0]), [None])):
            return False
    return True


def _harmless(node) -> bool:
    """A size, dtype or device read, or a guard on the rank, dtype or device: none depends on strides."""
    return node is not None and (node.op in STRIDE_BLIND or (node.op == GUARD and node.attrs.get("test") in
                                                              STRIDE_BLIND_TESTS and len(node.args) == 1))


def _attention(node, value: Value) -> bool:
    """``scaled_dot_product_attention`` reading ``value`` as query, key or value only (any strides serve)."""
    return node is not None and node.op == ATTENTION and not any(v is value for v in node.kwargs.values()) \
        and all(a is not value for a in node.args[3:])


def _rearranged(node, readers: dict, depth: int = 2) -> bool:
    """A transpose / permute read only by harmless nodes, attention, ``matmul`` and (``depth`` deep) rearranges
    like itself."""
    if node is None or node.op not in REARRANGE or not node.outputs or node.outputs[0] is None:
        return False
    out = node.outputs[0]
    return all(_harmless(r) or _attention(r, out) or (r is not None and r.op == MATMUL)
               or (depth > 0 and _rearranged(r, readers, depth - 1)) for r in readers.get(id(out), [None]))


def _splits_last_dim(view, result: Value, source: Value) -> bool:
    """Does ``view`` (of ``result``) keep each leading dim and split the last one in two?"""
    if view.kwargs or not view.outputs or view.outputs[0] is None:
        return False
    sizes = view.args[1] if len(view.args) == 2 and isinstance(view.args[1], (list, tuple)) else view.args[1:]
    shape = getattr(result.type, "shape", None)
    if shape is None or len(sizes) != len(shape) + 1:
        return False
    width, pieces, last = shape[-1], sizes[-2], sizes[-1]
    if not (_int(width) and _int(pieces) and _int(last)):
        return False
    if last == -1:   # (heads, -1)
        if pieces <= 0 or width % pieces:
            return False
    elif last <= 0 or width % last or pieces not in (-1, width // last):   # (-1 or width // d, d)
        return False
    leading = sizes[:-2]
    if -1 in leading:   # one leading dim left to torch: then the last two must be explicit and make the width
        if sum(1 for s in leading if _int(s) and s == -1) != 1 or -1 in (pieces, last) or pieces * last != width:
            return False
    return all((_int(s) and s == -1) or _size_of(s, i, (result, source)) for i, s in enumerate(leading))


def _size_of(s, dim: int, tensors: tuple) -> bool:
    """Is ``s`` the size of dim ``dim`` of one of ``tensors``, read in this graph?"""
    if not isinstance(s, Value) or s.producer is None or s.producer.op != SIZE or s.producer.kwargs:
        return False
    args = s.producer.args
    return len(args) == 2 and any(args[0] is t for t in tensors) and args[1] == dim


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
