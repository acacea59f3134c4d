"""Loader validation for the capture ops (dtype_of, device_of, finfo, autograd_function) and the
grad-mode / Function-region attributes any node may carry. Only data is checked; codegen writes
``torch.finfo(...).<attr>`` and ``with torch.<mode>():`` from fixed tables."""
from __future__ import annotations

from ..errors import LoadError
from ..ir import Value
from ..ir import regions
from ..ops.names import AUTOGRAD_FUNCTION, DEVICE_OF, DTYPE_OF, FINFO, FINFO_ATTRS

OPS = {DTYPE_OF, DEVICE_OF, FINFO, AUTOGRAD_FUNCTION}
_SCALAR_OUT = {DTYPE_OF: "dtype", DEVICE_OF: "device", FINFO: "float"}


def check_node_attrs(node, at: str) -> None:
    """``grad`` must name a grad mode; ``in_function`` / ``function_id`` must be ints."""
    attrs = node.attrs
    if "autocast" in attrs and not regions.valid_autocast(attrs["autocast"]):
        raise LoadError(f"{at}: malformed autocast state {str(attrs['autocast'])[:60]} (expected a list of "
                        "'<device>:<dtype>|off')")
    if "grad" in attrs and attrs["grad"] not in regions.REGIONS:
        raise LoadError(f"{at}: unknown grad mode {str(attrs['grad'])[:40]!r} "
                        f"(expected one of {', '.join(regions.REGIONS)})")
    for key in ("in_function", "function_id"):
        if key in attrs and (not isinstance(attrs[key], int) or isinstance(attrs[key], bool) or attrs[key] < 0):
            raise LoadError(f"{at}: {key} must be a non-negative int")


def check_node(node, at: str) -> None:
    if node.kwargs:
        raise LoadError(f"{at}: {node.op} takes no keyword arguments")
    if node.op == AUTOGRAD_FUNCTION:
        _check_autograd_function(node, at)
        return
    if len(node.args) != 1 or len(node.outputs) != 1 or node.outputs[0] is None:
        raise LoadError(f"{at}: {node.op} takes one argument and defines one value")
    out = node.outputs[0].type
    if getattr(out, "kind", None) != _SCALAR_OUT[node.op]:
        raise LoadError(f"{at}: {node.op} must define a {_SCALAR_OUT[node.op]}")
    (arg,) = node.args
    if node.op == FINFO:
        if node.attrs.get("attr") not in FINFO_ATTRS:
            raise LoadError(f"{at}: torch.finfo attribute must be one of {', '.join(FINFO_ATTRS)}")
        if not (isinstance(arg, Value) and getattr(arg.type, "kind", None) == "dtype"):
            raise LoadError(f"{at}: torch.finfo needs a recorded dtype")
        return
    if not (isinstance(arg, Value) and hasattr(arg.type, "shape")):
        raise LoadError(f"{at}: {node.op} needs a tensor")


def _check_autograd_function(node, at: str) -> None:
    name = node.attrs.get("name")
    if not isinstance(name, str) or not name or len(name) > 200:
        raise LoadError(f"{at}: a custom autograd Function needs its name")
    if len(node.args) != 2 or not isinstance(node.args[0], tuple) or not isinstance(node.args[1], tuple):
        raise LoadError(f"{at}: a custom autograd Function takes (arguments, forward outputs)")
    outputs = node.args[1]
    if not all(isinstance(v, Value) and hasattr(v.type, "shape") for v in outputs):
        raise LoadError(f"{at}: the forward outputs of a custom autograd Function must be tensors")
    tensor_slots = [v for v in node.outputs if v is not None]
    if len(tensor_slots) != len(outputs) or not all(hasattr(v.type, "shape") for v in tensor_slots):
        raise LoadError(f"{at}: a custom autograd Function defines one tensor per forward output")
    unpack = node.attrs.get("unpack")
    if unpack is None and len(node.outputs) != 1:
        raise LoadError(f"{at}: a custom autograd Function returning several values must unpack them")
    if unpack is not None and unpack != len(node.outputs):
        raise LoadError(f"{at}: unpack count does not match the outputs")
