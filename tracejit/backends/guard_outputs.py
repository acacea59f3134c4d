"""The ONNX-runtime backends' check of the guards the exported model computes itself (export/guard_outputs.py).

A program whose trace holds a guard that no check before the run can decide (a value read in Python:
Mask R-CNN's ``int(box[2] - box[0])``; the size of a tensor whose shape depends on the data: RetinaNet's
``boxes.numel() > 4000`` after ``scores > thresh``) is exported with ``guard_outputs=True``: each guard the
model cannot check at its entry is a boolean output after the program's outputs. ``GuardOutputs`` reads them
after each run (one bool per guard) and, where one is False, raises the traced program's GuardError naming the
guard's line (support/guards.py) instead of returning the traced branch's answer.
"""
from __future__ import annotations

from ..export._deps import require
from ..export.guard_outputs import OUTPUT_PREFIX
from ..export.guards import _constant_only, plan_guards
from ..export.tidy import drop_unread_nodes
from ..ir import ScalarType, Value, guard_expr
from ..support.guards import GuardFailure
from . import intermediate_sizes


def after_run_guards(graph) -> list:
    """The guards of ``graph`` (inlined) that only the model's outputs can check: value guards that read a
    tensor's values, and guards on the size of a tensor whose shape depends on the data."""
    _, unchecked = plan_guards(graph, guard_outputs=True)
    producers = {id(v): n for n in graph.nodes for v in n.outputs if v is not None}
    found = []
    for guard in unchecked:
        if guard.attrs.get("kind") == "value" and not _constant_only(guard.args, {}, sizes=True):
            found.append(guard)
        elif scalar_slice(guard, producers, ScalarType) is None and any(
                intermediate_sizes._data_dependent(n)
                for n in intermediate_sizes.tensor_slice(guard, producers).values()):
            found.append(guard)
    return found


class GuardOutputs:
    """Splits a run's outputs into the program's and the guard booleans, and raises GuardError on a False one."""

    def __init__(self, proto, graph, display: str):
        names = [o.name for o in proto.graph.output]
        self.names = [n for n in names if n.startswith(OUTPUT_PREFIX)]
        self.count = len(self.names)
        _, unchecked = plan_guards(graph, guard_outputs=True)
        self.guards = unchecked if self.count else []
        self.display = display
        if self.count and len(self.guards) != self.count:
            raise RuntimeError(f"{display}: the exported model has {self.count} guard outputs; the trace has "
                               f"{len(self.guards)} guards it cannot check at the entry")

    def split(self, outs: list) -> list:
        """The program's outputs of ``outs``; GuardError when a guard output is False."""
        if not self.count:
            return outs
        self.check_flags(outs[-self.count:])
        return outs[:-self.count]

    def guards_only_model(self, model: bytes) -> bytes:
        """``model`` (serialized) with the guard outputs as its only outputs and only the nodes they read: it
        computes the guards alone (where the traced branch's shapes no longer fit the call's data)."""
        return guards_only(model, self.names)

    def check_flags(self, flags) -> None:
        """GuardError when one of ``flags`` (the guard outputs alone, in order) is False."""
        for k, flag in enumerate(flags):
            if not bool(flag):
                self.fail(k)

    def fail(self, k: int):
        node = self.guards[k]
        pred = guard_expr(node.attrs["test"], [_text(a) for a in node.args], node.attrs.get("call"))
        GuardFailure([(node, pred)], self.display)(0, _NotRead(k))


def guards_only(model: bytes, names: list) -> bytes:
    """The serialized ONNX ``model`` reduced to its outputs ``names`` and the nodes they read (export/tidy.py's
    ``drop_unread_nodes``, which the model of the traced sizes is tidied with too)."""
    ir = require("onnx_ir")
    reduced = ir.serde.deserialize_model(require("onnx").load_from_string(model))
    outputs = reduced.graph.outputs
    kept = [v for v in outputs if v.name in names]
    outputs.clear()
    outputs.extend(kept)
    drop_unread_nodes(reduced.graph)
    return ir.serde.serialize_model(reduced).SerializeToString()


def scalar_slice(guard, producers: dict, scalar_type) -> dict | None:
    """{id(node): node} that ``guard`` reads, when all of them compute Python numbers (else None)."""
    found, todo = {}, list(guard.input_values())
    while todo:
        node = producers.get(id(todo.pop()))
        if node is None or id(node) in found:
            continue   # a graph input, or seen
        if not all(isinstance(v.type, scalar_type) for v in node.outputs if v is not None):
            return None   # a tensor op: an intermediate's size
        found[id(node)] = node
        todo.extend(node.input_values())
    return found


class _NotRead:
    """The value now of a guard checked in the model: only its outcome came back."""

    def __init__(self, k: int):
        self.k = k

    def __repr__(self) -> str:
        return f"the guard does not hold (the model's output {OUTPUT_PREFIX}{self.k} was False)"


def _text(a) -> str:
    if isinstance(a, Value):
        return a.hint or "value"
    return repr(a)

