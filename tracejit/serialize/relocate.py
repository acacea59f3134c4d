"""Where a loaded program's tensors go: back to the devices they were saved from, or to ``map_location``.

``load`` without ``map_location`` puts each tensor back on the device it was saved from, as ``torch.jit.load``
and ``torch.load`` do: the file records, for each tensor saved off the CPU, its device (``"tensor_devices"`` in
the program document; docs/FORMAT.md), read back here only as ``cuda`` or ``cuda:N``. A file that names a device
this machine lacks fails with a LoadError that says to pass ``map_location``. Files from before the field load on
the CPU, as they always did.

``load(..., map_location=device)`` moves a program's devices, not only its tensors.

A program traced on one device and loaded onto another with ``map_location`` runs its tensors there; what
it recorded about devices moves with them:

* a device guard (``str(t.device) == 'cuda:0'``: the traced code read a tensor's device in Python, as
  transformers' T5 and DeBERTa do to build masks) now expects the new device: the inputs of a program
  mapped to the CPU are CPU tensors, and the code path it recorded is the one eager takes there too;
* each recorded tensor type names the new device, so the backends that look at a program's device
  (``optimize_for_inference``'s CPU kernels, the CPU-only ONNX engines) see where it now runs.

A device the code names literally (``x.to("cuda")``) is a constant of the program and stays what the code
says (docs/CAPTURE.md).
"""
from __future__ import annotations

import torch

from ..errors import LoadError
from ..ir import GUARD, TensorType
from ..patterns import LazyPattern

_SAVED_DEVICE = LazyPattern(r"cuda(:[0-9]{1,3})?")   # (compiled on first use: a server's import compiles none)


def saved_devices(program: dict, restore: bool = True) -> dict:
    """``{tensor key: torch.device}`` for the tensors ``program`` (a file's program document) records as saved off
    the CPU; with ``restore`` (no ``map_location``) checks each device is one this machine has (LoadError
    otherwise, naming ``map_location``), else checks the table's form only and returns ``{}``."""
    recorded = program.get("tensor_devices", {})
    if not isinstance(recorded, dict):
        raise LoadError("the program's tensor_devices table is malformed (expected tensor name -> device)")
    out = {}
    for key, text in recorded.items():
        if not isinstance(text, str) or not _SAVED_DEVICE.fullmatch(text):
            raise LoadError(f"tensor {str(key)[:80]!r} names the device {str(text)[:40]!r}: a file records only "
                            "'cuda' or 'cuda:N'")
        device = torch.device(text)
        if not restore:
            continue
        if not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count():
            have = f"{torch.cuda.device_count()} CUDA device(s)" if torch.cuda.is_available() else \
                "no CUDA device (torch.cuda.is_available() is False)"
            raise LoadError(f"the program was saved with tensors on {text}, and this machine has {have}; "
                            "pass map_location='cpu' (or another device) to load it there")
        out[key] = device
    return out


def target_device(map_location) -> str:
    """The device text tensors read back on after loading to ``map_location`` ('cuda' -> 'cuda:0')."""
    device = torch.device(map_location)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        return f"cuda:{torch.cuda.current_device()}"
    return str(device)


def relocate(program, map_location) -> None:
    """Point ``program``'s device guards and tensor types at ``map_location`` (module docstring)."""
    target = target_device(map_location)
    todo, seen = [g for _, _, g in program.graphs()], set()
    while todo:
        graph = todo.pop()
        if id(graph) in seen:
            continue
        seen.add(id(graph))
        todo += list(getattr(graph, "callees", {}).values())
        for value in graph.inputs:
            _retype(value, target)
        for node in graph.nodes:
            if node.op == GUARD and node.attrs.get("kind") == "device" and isinstance(node.attrs.get("expected"), str):
                node.attrs["expected"] = node.attrs["seen"] = target
            for value in node.outputs:
                _retype(value, target)


def _retype(value, target: str) -> None:
    t = getattr(value, "type", None)
    if isinstance(t, TensorType) and t.device != target:
        value.type = TensorType(t.dtype, t.shape, target, t.requires_grad)


def check_device_constants(program) -> None:
    """A program loaded without ``map_location`` whose code names a device this machine lacks (``torch.zeros(...,
    device="xla")``, ``x.to("hpu")``, ``cuda:3`` on a one-GPU machine) is a LoadError naming it, not a raw
    error from torch at the first call. ``map_location`` (``"meta"`` for ``inspect``) loads it anyway: its
    literal devices stay what the code says, and the call that reaches one fails there."""
    missing, todo, seen = None, [g for _, _, g in program.graphs()], set()
    while todo and missing is None:
        graph = todo.pop()
        if id(graph) in seen:
            continue
        seen.add(id(graph))
        todo += list(getattr(graph, "callees", {}).values())
        for node in graph.nodes:
            found = _missing_device(node.args) if node.args else None
            if found is None and node.kwargs:
                found = _missing_device(tuple(node.kwargs.values()))
            if found is not None:
                missing = (found, node)
                break
    if missing is not None:
        device, node = missing
        at = f" (at {node.source})" if node.source is not None else ""
        raise LoadError(f"the program's code names the device {str(device)!r}{at}, which this machine does not "
                        "have; pass map_location='cpu' (or another device) to load it anyway")


def device_available(device: torch.device) -> bool:
    """Can this process run on ``device``? cpu and meta always; cuda / xpu / mps when their torch backend says
    so (and the index exists); any other type (hpu, xla, ipu) only when its backend module is already part of
    torch (a plugin imported by the user) and says it is available: default-deny, nothing imported here."""
    kind = device.type
    if kind in ("cpu", "meta"):
        return True
    if kind == "mps":
        return bool(torch.backends.mps.is_available())
    backend = torch.__dict__.get(kind)   # not getattr: torch's module __getattr__ may import
    try:
        if backend is None or not backend.is_available():
            return False
        count = backend.device_count() if hasattr(backend, "device_count") else 1
    except Exception:   # a plugin that cannot answer: not available
        return False
    return (device.index or 0) < count


def _missing_device(v):
    """The first ``torch.device`` among ``v``'s leaves (lists and tuples, nested) this machine lacks, or None (one
    recursive walk per node: a generator of leaves was 85,000 calls for Mask R-CNN's 6,800 nodes)."""
    if isinstance(v, torch.device):
        return None if device_available(v) else v
    if isinstance(v, (list, tuple)):
        for x in v:
            found = _missing_device(x)
            if found is not None:
                return found
    return None
