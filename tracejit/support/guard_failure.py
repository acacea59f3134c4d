"""The error a failed guard raises: which guard, the value at trace time, the value now, the user's line."""
from __future__ import annotations

import torch

from ..errors import GuardError


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
