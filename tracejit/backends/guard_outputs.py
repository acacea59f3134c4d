"""The ONNX-runtime backends' check of the guards the exported model computes itself (export/guard_outputs.py).

A program whose trace holds a guard that no check before the run can decide (a value read in Python:
Mask R-CNN's ``int(box[2] - box[0])``; the size of a tensor whose shape depends on the data: RetinaNet's
``boxes.numel() > 4000`` after ``scores > thresh``) is exported with ``guard_outputs=True``: each guard the
model cannot check at its entry is a boolean output after the program's outputs. ``GuardOutputs`` reads them
after each run (one bool per guard); where one is False the run's answer (the traced branch's) is dropped and the
traced program answers the call: its own guards, computed by torch, decide. Where they hold (the runtime's values
moved a truncated size: onnxruntime's Mask R-CNN boxes differ from torch's by fp32 reassociation, enough to change
one ``int(box[2] - box[0])`` of 96), its answer is eager's; where they fail, a live traced object traces again and a
loaded one raises the GuardError naming the line (support/guards.py). Never the traced branch's answer.
"""
from __future__ import annotations

from ..export._deps import require
from ..export.guard_outputs import OUTPUT_PREFIX, describe
from ..export.guards import _constant_only, plan_guards
from ..export.tidy import drop_unread_nodes
from ..ir import ScalarType
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
    """Splits a run's outputs into the program's and the guard booleans, and says whether the guards all hold."""

    def __init__(self, proto, graph, display: str):
        names = [o.name for o in proto.graph.output]
        self.names = [n for n in names if n.startswith(OUTPUT_PREFIX)]
        self.count = len(self.names)
        self.guards = []
        if self.count:
            _, unchecked = plan_guards(graph, guard_outputs=True)
            self.guards = list(unchecked)
            if len(unchecked) != self.count:
                raise RuntimeError(f"{display}: the exported model has {self.count} guard outputs; the trace has "
                                   f"{len(unchecked)} guards it cannot check at the entry")

    def hold(self, outs) -> bool:
        """Are the guard outputs among a run's ``outs`` (the last ``count``) all True?"""
        return all(bool(flag) for flag in outs[len(outs) - self.count:])

    def first_failed(self, outs) -> str:
        """What the first False guard output among a run's ``outs`` required and where ('' when all hold)."""
        for k, flag in enumerate(outs[len(outs) - self.count:]):
            if not bool(flag):
                return describe(self.guards[k]) if k < len(self.guards) else self.names[k]
        return ""

    def strip(self, outs: list) -> list:
        """The program's outputs of ``outs`` (the guard outputs dropped)."""
        return outs[:len(outs) - self.count] if self.count else outs


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
