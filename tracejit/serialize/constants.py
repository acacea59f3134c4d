"""Tagged constants <-> plain JSON data: numbers, strings, dtypes, devices, layouts, memory formats, slices,
tuples and lists (docs/FORMAT.md). Below encode.py, guards.py and structure.py, which all read them."""
from __future__ import annotations

import math

import torch

from ..errors import LoadError, SaveError
from ..ir.state_tests import DEVICE_TYPES

_DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16, torch.int8,
    torch.uint8, torch.bool, torch.complex64, torch.complex128)}
_LAYOUTS = {"strided": torch.strided}   # sparse layouts are refused: C++ does not check their invariants
_MEMORY_FORMATS = {"contiguous_format": torch.contiguous_format, "channels_last": torch.channels_last,
                   "preserve_format": torch.preserve_format, "channels_last_3d": torch.channels_last_3d}


def device_constant(text, where: str) -> torch.device:
    """A device a file names: one of the device types tracejit traces on (ir/state_tests.DEVICE_TYPES). Others
    (``lazy``, ``vulkan``, the Caffe2 types ``opengl`` / ``mkldnn`` whose use trips an internal assert in
    ATen, ``privateuseone`` which imports a module named after it) are refused at load, not at the call."""
    device = torch.device(str(text)[:40]) if isinstance(text, str) else None
    if device is None or device.type not in DEVICE_TYPES:
        raise LoadError(f"{where}: the device {str(text)[:40]!r} is not one a file may name (device types: "
                        f"{', '.join(DEVICE_TYPES)})")
    return device


def dtype_name(d: torch.dtype) -> str:
    return str(d).replace("torch.", "")


class NotDataError(SaveError):
    """A constant a trace froze is a Python object that is not data (a transformers cache, a config object): the
    SaveError of that case alone (serialize/left_out.py leaves a submodule method holding one out of the file)."""


def encode_const(c, where: str):
    if c is None or isinstance(c, (bool, str)):
        return c
    if isinstance(c, int):
        return int(c)
    if isinstance(c, float):
        return {"float": repr(c)} if (math.isinf(c) or math.isnan(c)) else c
    if isinstance(c, complex):
        return {"complex": [c.real, c.imag]}
    if isinstance(c, torch.dtype):
        return {"dtype": dtype_name(c)}
    if isinstance(c, torch.device):
        return {"device": str(c)}
    if isinstance(c, torch.layout):
        if c is not torch.strided:
            raise SaveError(f"{where}: the layout {c} cannot be saved (tracejit.load accepts strided tensors only)")
        return {"layout": str(c).replace("torch.", "")}
    if isinstance(c, torch.memory_format):
        return {"memory_format": str(c).replace("torch.", "")}
    if c is Ellipsis:
        return {"ellipsis": True}
    if isinstance(c, slice):
        return {"slice": [encode_const(c.start, where), encode_const(c.stop, where), encode_const(c.step, where)]}
    if isinstance(c, tuple):
        return {"tuple": [encode_const(x, where) for x in c]}
    if isinstance(c, list):
        return [encode_const(x, where) for x in c]
    raise NotDataError(f"{where}: a constant of type {type(c).__name__} ({c!r:.80}) cannot be saved as data")


def decode_const(c, where: str, depth: int = 0):
    if depth > 32:
        raise LoadError(f"{where}: constants nested deeper than 32 levels")
    if c is None or isinstance(c, (bool, int, float, str)):
        return c
    if isinstance(c, list):
        return [decode_const(x, where, depth + 1) for x in c]
    if not isinstance(c, dict) or len(c) != 1:
        raise LoadError(f"{where}: malformed constant {str(c)[:80]}")
    (tag, body), = c.items()
    try:
        if tag == "float":
            if body not in ("inf", "-inf", "nan"):
                raise LoadError(f"{where}: bad float constant {body!r}")
            return float(body)
        if tag == "complex":
            return complex(float(body[0]), float(body[1]))
        if tag == "dtype":
            return _DTYPES[body]
        if tag == "device":
            return device_constant(body, where)
        if tag == "layout":
            return _LAYOUTS[body]
        if tag == "memory_format":
            return _MEMORY_FORMATS[body]
        if tag == "ellipsis":
            return Ellipsis
        if tag == "slice":
            a, b, s = (decode_const(x, where, depth + 1) for x in body)
            return slice(a, b, s)
        if tag == "tuple":
            return tuple(decode_const(x, where, depth + 1) for x in body)
    except LoadError:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as e:
        raise LoadError(f"{where}: bad {tag} constant {str(body)[:80]}: {e}") from None
    raise LoadError(f"{where}: unknown constant tag {tag!r}")
