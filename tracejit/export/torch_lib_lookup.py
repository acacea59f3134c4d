"""The torch_lib function (onnxscript's ATen-to-ONNX library) for a tracejit op name: ``lookup``. Apart from
lowering.py so that the handlers lowering.py registers (unlisted_ops.py) can fall back to torch_lib too."""
from __future__ import annotations

from ..ops.names import OpName, split_name
from ._deps import require

require("onnxscript")   # the ImportError names the onnx extra
from onnxscript.function_libs.torch_lib import ops as _torch_lib_ops  # noqa: E402,F401  (fills the registry)
from onnxscript.function_libs.torch_lib.registration import default_registry  # noqa: E402

# Python operator dunders tracejit records under their own names -> the ATen op torch_lib lists
ALIASES = {"__and__": "bitwise_and", "__or__": "bitwise_or", "__xor__": "bitwise_xor",
           "__lshift__": "bitwise_left_shift", "__rshift__": "bitwise_right_shift", "true_divide": "div",
           "floor_divide": "floor_divide", "positive": "positive"}


# overloads whose meaning differs from the bare name's in torch_lib
OVERLOAD_ALIASES = {"aten::min.other": "aten::minimum", "aten::max.other": "aten::maximum"}
NO_OVERLOAD_FALLBACK = {"aten::min", "aten::max", "aten::sum", "aten::mean", "aten::std", "aten::var",
                        "aten::prod", "aten::all", "aten::any", "aten::argmax", "aten::argmin", "aten::median"}


def lookup(op_name: str):
    """The torch_lib function for ``aten::name.overload``, or None."""
    if op_name in default_registry and default_registry[op_name].overloads:
        return default_registry[op_name].overloads[0]   # listed as recorded (aten::__rshift__.Scalar)
    ns, name, overload = split_name(op_name)
    op_name = OpName(ns, ALIASES.get(name, name), overload).qualified
    if op_name in OVERLOAD_ALIASES:
        op_name = OVERLOAD_ALIASES[op_name]
    keys = [op_name[:-len(".default")] if op_name.endswith(".default") else op_name]
    if not op_name.endswith(".default") and op_name.rsplit(".", 1)[0] not in NO_OVERLOAD_FALLBACK:
        # torch_lib lists many overloads under the bare name (aten::div for div.Tensor_mode ...)
        keys.append(op_name.rsplit(".", 1)[0])
    for key in keys:
        if key in default_registry and default_registry[key].overloads:
            return default_registry[key].overloads[0]
    return None
