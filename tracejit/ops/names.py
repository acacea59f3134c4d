"""Op names: the one parser of ``ns::name.overload`` and the names of tracejit's own ops.

Every module that needs the parts of an op name, or names one of tracejit's own ops, reads them here
(tests/ops/test_no_op_tables.py checks that no other module spells a set of op names itself).
"""
from __future__ import annotations

from typing import NamedTuple


class OpName(NamedTuple):
    """The parts of a qualified op name: ``aten::add_.Tensor`` -> ("aten", "add_", "Tensor")."""
    namespace: str
    name: str
    overload: str     # "" when the name carries none

    @property
    def qualified(self) -> str:
        return f"{self.namespace}::{self.name}.{self.overload}" if self.overload else f"{self.namespace}::{self.name}"


def split_name(op: str) -> OpName:
    """``"aten::add_.Tensor"`` -> OpName("aten", "add_", "Tensor"); a bare ``"add"`` has namespace ""."""
    ns, sep, rest = op.partition("::")
    if not sep:
        ns, rest = "", op
    name, _, overload = rest.partition(".")
    return OpName(ns, name, overload)


def base_name(op: str) -> str:
    """The op's name without namespace or overload: ``aten::add_.Tensor`` -> ``add_``."""
    return split_name(op).name


# tracejit's own ops (their attribute schemas and purity: ir/ops.py's OpDef table)
GET_ATTR = "tracejit::get_attr"
CONSTANT = "tracejit::constant"
CALL_MODULE = "tracejit::call_module"
GETITEM = "tracejit::getitem"
SETITEM = "tracejit::setitem"
DTYPE_OF = "tracejit::dtype_of"
DEVICE_OF = "tracejit::device_of"
FINFO = "tracejit::finfo"
AUTOGRAD_FUNCTION = "tracejit::autograd_function"
KERNEL = "tracejit::kernel"
SYM_MATH = "tracejit::sym_math"
MANUAL_SEED = "tracejit::manual_seed"
NEW_GENERATOR = "tracejit::new_generator"
SEED_GENERATOR = "tracejit::seed_generator"
GUARD = "tracejit::guard"

# the program's own random number generation (trace/rng_record.py)
RNG_OPS = (MANUAL_SEED, NEW_GENERATOR, SEED_GENERATOR)

# values of the module or the trace, not computed from the inputs
STATE_READS = (GET_ATTR, CONSTANT)
# reads of a tensor's shape (the traced sizes), never of its values
SIZE_READS = ("aten::size.int", "aten::sym_size.int", "aten::numel.default")
# views that only reorder a tensor's dims (its strides permuted, no value touched; passes/sibling_slices.py)
DIM_ORDER_VIEWS = ("aten::transpose.int", "aten::permute.default")
# a dtype / device / finfo read: capture by provenance (docs/CAPTURE.md)
CAPTURE_OPS = (DTYPE_OF, DEVICE_OF, FINFO)
# the torch.finfo fields a tracejit::finfo node may read
FINFO_ATTRS = ("min", "max", "eps", "tiny", "smallest_normal", "resolution")
# tracejit::sym_math's functions -> (number of operands, what it returns: "int", "float" or "same")
SYM_FNS = {"ceil": (1, "int"), "floor": (1, "int"), "trunc": (1, "int"), "round": (1, "int"),
           "max": (2, "same"), "min": (2, "same")}
