"""The TorchScript ``prim::`` nodes a traced graph holds, as conversion steps.

Each handler takes the running ``MethodConversion``, the TorchScript node and its inputs as
(ir, real) pairs, and returns one (ir, real) pair per node output. Tuples and lists are kept
as Python structure (a traced graph builds and unpacks them with constant shapes).
"""
from __future__ import annotations

import torch

from ..ir import Node, Value
from ..ir.target import function
from .errors import MigrationError


def constant(conv, n, ins) -> list:
    out = n.output()
    value = out.toIValue()
    if isinstance(value, torch.Tensor):
        return [conv.constant_tensor(n, value)]
    if value is None or isinstance(value, (bool, int, float, str, torch.device, list, tuple)):
        return [(value, value)]
    raise MigrationError(f"{conv.at(n)}: a constant of type {type(value).__name__} has no tracejit form")


def num_to_tensor(conv, n, ins) -> list:
    ir, real = ins[0]
    dtype = torch.int64 if isinstance(real, int) and not isinstance(real, bool) else \
        torch.bool if isinstance(real, bool) else torch.float64
    t = torch.scalar_tensor(real, dtype=dtype)
    (v,) = conv.add(Node("aten::scalar_tensor", function("torch.scalar_tensor"), (ir,), {"dtype": dtype}), [t], n)
    return [(v, t)]


def unpack(conv, n, ins) -> list:
    ir, real = ins[0]
    if not isinstance(ir, (tuple, list)) or len(ir) != len(list(n.outputs())):
        raise MigrationError(f"{conv.at(n)}: unpacks something that is not a tuple or list of that length")
    return list(zip(ir, real))


def index(conv, n, ins) -> list:
    (ir, real), (idx, _) = ins[0], ins[1]
    if isinstance(idx, Value) or not isinstance(ir, (tuple, list, dict)):
        raise MigrationError(f"{conv.at(n)}: indexes a list with a computed index; the trace kept no form "
                             "tracejit can replay")
    return [(ir[idx], real[idx])]


def dict_construct(conv, n, ins) -> list:
    keys = [ir for ir, _ in ins[0::2]]
    if any(isinstance(k, Value) for k in keys):
        raise MigrationError(f"{conv.at(n)}: a dict with computed keys has no tracejit form")
    return [(dict(zip(keys, (ir for ir, _ in ins[1::2]))), dict(zip(keys, (r for _, r in ins[1::2]))))]


def _construct(kind):
    def build(conv, n, ins):
        return [(kind(ir for ir, _ in ins), kind(r for _, r in ins))]
    return build


HANDLERS = {
    "prim::Constant": constant,
    "prim::GetAttr": lambda conv, n, ins: conv.get_attr(n, ins),
    "prim::CallMethod": lambda conv, n, ins: conv.call_method(n, ins),
    "prim::TupleConstruct": _construct(tuple),
    "prim::ListConstruct": _construct(list),
    "prim::DictConstruct": dict_construct,
    "prim::TupleUnpack": unpack,
    "prim::ListUnpack": unpack,
    "prim::TupleIndex": index,
    "aten::__getitem__": index,
    "aten::__getitem__.Dict_str": index,
    "prim::NumToTensor": num_to_tensor,
}
