"""The grad-mode and autocast regions a node may run in (``attrs["grad"]``, ``attrs["autocast"]``): the
values the trace records (trace/grad_mode.py, trace/autocast_mode.py), the loader accepts
(serialize/capture_ops.py) and codegen opens as ``with`` blocks (codegen/capture_emit.py). Kept apart from
the recorder's stand-ins so that loading a program does not import them."""
from __future__ import annotations

from ..patterns import LazyPattern

NO_GRAD, ENABLE_GRAD, INFERENCE = "no_grad", "enable_grad", "inference"
REGIONS = (NO_GRAD, ENABLE_GRAD, INFERENCE)

_CONTEXTS_EMITTED = {NO_GRAD: "torch.no_grad()", ENABLE_GRAD: "torch.enable_grad()",
                     INFERENCE: "torch.inference_mode()"}


def region_context(region: str) -> str:
    """The context manager codegen opens for a region (regions come from REGIONS only)."""
    return _CONTEXTS_EMITTED[region]


# autocast: one "<device>:<dtype>" (or "<device>:off") per device whose state the traced code set
AUTOCAST_DEVICES = ("cpu", "cuda")
AUTOCAST_DTYPES = ("float16", "bfloat16", "float32")
_AUTOCAST_ENTRY = LazyPattern(rf"^({'|'.join(AUTOCAST_DEVICES)}):(off|{'|'.join(AUTOCAST_DTYPES)})$")


def valid_autocast(value) -> bool:
    return isinstance(value, list) and 0 < len(value) <= len(AUTOCAST_DEVICES) and all(
        isinstance(v, str) and _AUTOCAST_ENTRY.match(v) for v in value)


def autocast_header_parts(value: list) -> list[str]:
    """``torch.autocast('cpu', dtype=torch.bfloat16)`` / ``torch.autocast('cpu', enabled=False)`` per entry."""
    parts = []
    for entry in value:
        m = _AUTOCAST_ENTRY.match(entry)
        if m is None:
            raise ValueError(f"codegen: malformed autocast state {entry!r}")
        device, dtype = m.groups()
        parts.append(f"torch.autocast({device!r}, enabled=False)" if dtype == "off"
                     else f"torch.autocast({device!r}, dtype=torch.{dtype})")
    return parts
