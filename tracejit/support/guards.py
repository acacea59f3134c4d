"""Call-time guards, the part generated code calls: what a guard compares (``plain_value``, made the same at
trace time and at call time), the check of an input's kind (``check_input_kind``), and the error a failed
guard raises (``GuardFailure``: which guard, the value at trace time, the value now, the user's line).

Shared by the recorder (trace/boundary.py, trace/guards.py), codegen (codegen/guards.py, codegen/signature.py)
and the loader (serialize/guards.py, serialize/compile_once.py), so that loading and calling a program does not
import the recorder's boundary rule. ``METADATA`` names the tensor metadata reads (trace/boundary.py guards
them; serialize/guards.py lets a file's guards repeat them)."""
from __future__ import annotations

import math

import torch

from ..errors import GuardError

# tensor metadata: a read of one is guarded (a ``call`` guard) and counted as "metadata" in the ledger, not as a
# value read (trace/boundary.py); a file's guards may repeat only such calls (serialize/guards.FILE_CALL_METHODS)
METADATA = {"is_contiguous", "stride", "storage_offset", "requires_grad", "grad_fn", "_version", "nbytes",
            "is_same_size", "is_leaf", "_is_view", "has_names", "names", "layout", "is_sparse", "is_quantized",
            "is_nested", "is_mkldnn", "is_pinned", "is_shared", "is_set_to", "is_conj", "is_neg", "is_inference",
            "retains_grad", "output_nr", "_base", "is_mps", "is_xpu", "is_vulkan", "is_ipu", "is_xla", "is_mtia",
            "is_maia", "is_sparse_csr", "is_non_overlapping_and_dense", "numel", "nelement", "layout"}

# guard tests whose expected value is made plain (plain_value) when it is not a bool
PLAIN_VALUE_TESTS = {"item", "float", "tolist", "int", "call"}


def plain_value(x, depth: int = 0):
    """``x`` as the guard compares it: the same at trace time and at call time.

    bools, ints and strings stay; a float stays unless it is NaN or a zero, which become their
    ``repr`` (``"nan"``, ``"-0.0"``, ``"0.0"``: ``nan != nan`` and ``-0.0 == 0.0`` would make a guard
    always fail or pass wrongly; a NaN whose sign bit is set is ``"-nan"``, which ``copysign`` tells apart); tuples, lists and ``torch.Size`` become lists; a dtype, device,
    layout or memory format its name; a numpy array or scalar its values; any other object the name
    of its type (``grad_fn`` -> ``"MulBackward0"``, ``None`` stays ``None``).
    """
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return int.__int__(x)
    if isinstance(x, float):
        v = float.__float__(x)
        if v != v:   # NaN keeps its sign bit (math.copysign(1.0, x.min().item()) reads it; repr does not show it)
            return "-nan" if math.copysign(1.0, v) < 0 else "nan"
        return repr(v) if v == 0.0 else v
    if isinstance(x, (tuple, list)) and depth < 8:
        return [plain_value(i, depth + 1) for i in x]
    if isinstance(x, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(x)
    if type(x).__module__ == "numpy" and hasattr(x, "tolist"):
        return plain_value(x.tolist(), depth + 1)
    if isinstance(x, complex):
        return [plain_value(x.real), plain_value(x.imag)]
    return f"<{type(x).__qualname__}>"


def needs_plain(test: str, expected) -> bool:
    """Does the guard's predicate go through ``plain_value`` at call time (codegen/guards.py)?"""
    if test not in PLAIN_VALUE_TESTS or isinstance(expected, (bool, int)):
        return False
    if test == "call":
        return True   # a text may stand for an object's type, a list for a tuple
    return _holds_text(expected)


def _holds_text(v) -> bool:
    return isinstance(v, str) or (isinstance(v, list) and any(_holds_text(i) for i in v))


# ---- inputs: their Python type and attributes ------------------------------------------------------
# Code may branch on ``isinstance(x, MySubclass)`` or read ``x.scale`` set on an input: neither reaches the
# recorder. So a traced program takes plain tensors (or nn.Parameters) without Python attributes, checked on
# entry (codegen/signature.py: ``type(x) is not Tensor or x.__dict__`` first, then ``check_input_kind``).
INPUT_TYPES = (torch.Tensor, torch.nn.Parameter)


def tensor_kind(x) -> str:
    """``"Tensor"`` for a plain tensor; else its type's name and the names of its Python attributes."""
    attrs = getattr(x, "__dict__", None)
    name = type(x).__qualname__
    return f"{name} with Python attributes {sorted(attrs)}" if attrs else name


def check_input_kind(where: str, x, input_error) -> None:
    """Called by generated code for an input that is not exactly a plain Tensor without attributes."""
    if not isinstance(x, torch.Tensor):
        input_error(where, x, "Tensor", None)
    elif type(x) not in INPUT_TYPES or x.__dict__:
        raise GuardError(f"input {where!r} is a {tensor_kind(x)}; the trace was made with a plain tensor and "
                         "code may read the type (isinstance) or the attributes, which no guard can check. Pass a "
                         "plain tensor (x.as_subclass(torch.Tensor)), or trace again with such an input",
                         expected="Tensor", seen=tensor_kind(x))


# ---- the error a failed guard raises ---------------------------------------------------------------

def _short(v) -> str:
    if isinstance(v, torch.Tensor):
        return f"Tensor(shape={tuple(v.shape)}, dtype={v.dtype})"
    text = repr(v)
    return text if len(text) <= 120 else text[:117] + "..."


class GuardFailure:
    """Called by generated code as ``_tj_guard(k, value_now)``; raises GuardError for guard ``k``."""

    def __init__(self, table: list, fn_name: str):
        self.table = table
        self.fn_name = fn_name

    def __call__(self, k: int, now):
        node, pred = self.table[k]
        raise GuardError(self.message(node, pred, now), guard=node, expected=node.attrs["expected"], seen=now,
                         source=node.source)

    def message(self, node, pred: str, now) -> str:
        a = node.attrs
        if a["test"] == "training" and a.get("path"):
            traced, current = ("train", "eval") if a["expected"] else ("eval", "train")
            return (f"{self.fn_name}: submodule '{a['path']}' was traced in {traced} mode and its forward read the "
                    f"flag (the ops it recorded are that mode's); it is now in {current} mode. Switch it back with "
                    f".{traced}(), or trace the original again in this mode.")
        if a["test"] == "training":
            traced, current = ("train", "eval") if a["expected"] else ("eval", "train")
            return (f"{self.fn_name}: the module was traced in {traced} mode, and tracing fixed the training flag; "
                    f"it is now in {current} mode. Switch it back with .{traced}(), or trace it again in this "
                    "mode (retracing needs the original module, kept when _store_inputs=True).")
        where = f"{node.source.filename}:{node.source.lineno}" if node.source is not None else "(no source line)"
        line = f" `{a.get('line')}`" if a.get("line") else ""
        if isinstance(a["expected"], bool) and pred != "self.training":
            relied = f"`{pred}` was {a['expected']}"
        else:
            relied = f"`{pred}` == {_short(a['expected'])}"
        return (f"{self.fn_name}: guard failed at {where}{line}: {a.get('what', a['kind'])}. The trace relied on "
                f"{relied} (value at trace time: {_short(a.get('seen'))}); value now: {_short(now)}. A traced object "
                "that holds its original retraces for such inputs; a loaded program (or one whose original was "
                "dropped) cannot: trace the original again with inputs like these (trace(..., specialize_for=[...]) "
                "keeps one specialization per kind of input, in memory and in the saved file).")
