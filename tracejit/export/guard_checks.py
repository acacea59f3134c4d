"""Size guards the exported model checks itself, by default: a run where one fails stops with an error naming it.

An input dimension of an exported model is dynamic unless a guard pins it (guards.py); every other size guard
of the trace (the size of an intermediate: ``for i in range(h.shape[2])`` unrolls a loop over a transposed
input, as transformers' Mamba scan does; ``seq_len > 64``; size math of inputs) held for the traced sizes
only, and the model computes the traced branch for any size. Mamba's unrolled 16-step scan then broadcast
against a 24-long sequence (an onnxruntime error), and a scan whose result is summed ran 16 of 24 steps
and answered a wrong number without any error. So each such guard is lowered where the trace checked it
(guard_outputs.lower_guard: the boolean, from the ONNX values of the sizes it reads) into a check node:

    Reshape(Constant([1]), Where(holds, [1], [2]))

which yields ``[1]`` where the guard holds and makes the run fail (a one-element tensor cannot take shape
``[2]``) where it does not; the node is named ``tracejit_guard_<k>_failed_at_<its source line>_<what the
guard required>``, which onnxruntime's error message quotes. Each value computed before a check that a later
node or an output reads is read through it: ``Reshape(value, Shape(value) * ones)``, ``ones`` the product of
the checks lowered so far, expanded to its rank: exactly the value (a reshape to its own shape moves no data),
and no node after a guard can run before the guard's check. The product is kept as one running product, one Mul
per check (a value read after checks it does not need waits for them too, which changes no answer): a product per
(first, last) pair of checks gave RetinaNet at batch 8, whose per-image steps read values across many checks, 541
Muls of such products (of its 1,271). (``Where(holds, value,
value)`` would keep the shape inferable, but onnxruntime's optimizer drops a Where whose two branches are one
value, and the check with it: the traced branch's answer again. A runtime's shape inference cannot see
through the Reshape: OpenVINO refused a GPT-2 ``SplitToSequence`` on the axis it made dynamic; the
onnxruntime / OpenVINO backends export with ``check_guards=False``, they check these guards before each run.) Ordering by data, not by
the executor's choice, matters: with the outputs alone read through the checks, onnxruntime ran Mamba's
failing broadcast (after layer 0's guard) before layer 1's check and reported that "16 by 24" instead.
Values computed from constants and parameters alone are not gated (they are the same at any size, and stay
foldable). The metadata ``tracejit.checked_guards`` lists the checks. With the input sizes fixed
(static_shapes.py) they fold away.

Guards without a form here (guard_outputs.check_supported) keep the former behaviour: a warning and the
metadata ``tracejit.unchecked_guards``.
"""
from __future__ import annotations

import bisect

import numpy as np

from ._deps import require
from .errors import ExportError
from ..ir import Value
from ..ops import draws_random, split_name
from ..ops.names import STATE_READS
from .guards import _leaves
from . import guard_outputs

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402

METADATA_KEY = "tracejit.checked_guards"
NODE_PREFIX = "tracejit_guard_"
_NAME_LIMIT = 200


def has_form(node) -> bool:
    """Can ``node`` (a guard) be computed in the graph (guard_outputs.lower_guard)?"""
    try:
        guard_outputs.check_supported(node)
    except ExportError:
        return False
    return True


def node_name(k: int, node) -> str:
    """The check node's name: the guard's number, what it required and its source line (as identifier text)."""
    where = str(node.source or node.attrs.get("line") or "unknown line")
    at = where.rfind("site-packages/")
    where = where[at + len("site-packages/"):] if at >= 0 else where[-80:]   # the line number must fit
    what = node.attrs.get("what") or node.attrs.get("test")
    text = "".join(c if c.isalnum() or c in "._:=<>!/" else "_" for c in f"at {where}: {what}")
    return f"{NODE_PREFIX}{k}_failed_{text}"[:_NAME_LIMIT]


def lower_check(lowering, node, k: int):
    """The ``[1]`` int64 value that guard ``node`` (the k-th checked) yields where it holds; the run fails where
    it does not."""
    holds = guard_outputs.lower_guard(lowering, node)
    one = op.Constant(value=ir.tensor(np.ones(1, dtype=np.int64)))
    shape = op.Where(holds, one, op.Constant(value=ir.tensor(np.full(1, 2, dtype=np.int64))))
    check = op.Reshape(one, shape)
    check.producer().name = node_name(k, node)
    return check


class GuardChecks:
    """The checks of one export: lowered at their guards' places, and every value computed before a check that a
    later node (or an output) reads is read through it, so nothing after a guard runs before its check."""

    def __init__(self, guards: list, graph):
        self.pending = {id(g) for g in guards}
        self.values: list = []   # the check values, in the graph's order
        self._positions: list = []   # the graph position of each one's guard
        self._node_position = {id(n): i for i, n in enumerate(graph.nodes)}
        self._epoch: dict = {}   # id(traced Value) -> how many checks its ONNX value already depends on
        self._ones: dict = {}   # (checks, rank) -> the running product expanded to that rank
        self._running: list = []   # the running products of the checks (_running_product)
        self._constant: dict = {}

    def at_guard(self, lowering, node) -> None:
        """Lower guard ``node``'s check, if it is one the graph checks."""
        if id(node) in self.pending:
            self.values.append(lower_check(lowering, node, len(self.values)))
            self._positions.append(self._node_position.get(id(node), -1))

    def read(self, traced_value, value, env: dict):
        """``value`` (the ONNX value of ``traced_value``) read after the checks lowered so far: gated by the ones
        lowered since it was computed (the gated value replaces it in ``env``). Values computed from constants
        and parameters alone are not gated: they hold at any input size (and stay foldable)."""
        n = len(self.values)
        if not n or not isinstance(value, ir.Value) or not isinstance(value.type, (ir.TensorType, type(None))):
            return value
        epoch = self._epoch.get(id(traced_value))
        if epoch is None:
            producer = traced_value.producer
            where = -1 if producer is None else self._node_position.get(id(producer), -1)
            epoch = bisect.bisect_left(self._positions, where)
        if epoch >= n or self._constant_derived(traced_value):
            self._epoch[id(traced_value)] = n
            return value
        gated = op.Reshape(value, op.Mul(op.Shape(value), self._ones_like_shape(value, n)))
        gated.type = value.type
        gated.shape = value.shape.copy() if value.shape is not None else None
        env[id(traced_value)] = gated
        self._epoch[id(traced_value)] = n
        return gated

    def _constant_derived(self, v) -> bool:
        """Is ``v`` computed from the graph's constants and parameters alone, by ops that draw nothing at random?
        (guards.py's test, memoized over the whole graph: each value is decided once.)"""
        memo = self._constant
        stack = [(v, False)]
        while stack:
            x, expanded = stack.pop()
            if id(x) in memo:
                continue
            p = x.producer
            if p is None or not (p.op in STATE_READS or (
                    p.op.startswith("aten::") and not draws_random(split_name(p.op)[1], p.args, p.kwargs))):
                memo[id(x)] = False
                continue
            if p.op in STATE_READS:
                memo[id(x)] = True
                continue
            parents = [a for a in _leaves((p.args, p.kwargs)) if isinstance(a, Value)]
            if expanded:
                memo[id(x)] = all(memo[id(a)] for a in parents)
            else:
                stack.append((x, True))
                stack.extend((a, False) for a in parents if id(a) not in memo)
        return memo[id(v)]

    def _ones_like_shape(self, value, last: int):
        """int64 ones, one per dimension of ``value``, computed from checks ``0..last-1`` (a value computed after
        check ``first`` needs ``first..last-1`` of them; the running product holds those and the ones before)."""
        product = self._running_product(last)
        rank = value.shape.rank() if value.shape is not None else None
        if rank is None:
            return op.Expand(product, op.Shape(op.Shape(value)))
        key = (last, rank)
        if key not in self._ones:
            self._ones[key] = op.Expand(product, op.Constant(value=ir.tensor(np.array([rank], np.int64))))
        return self._ones[key]

    def _running_product(self, last: int):
        """The product of checks ``0..last-1``: one Mul per check, each product kept for the reads after it."""
        running = self._running   # running[k]: the product of checks 0..k
        while len(running) < last:
            k = len(running)
            running.append(self.values[0] if k == 0 else op.Mul(running[-1], self.values[k]))
        return running[last - 1]


def metadata(guards: list) -> str:
    """The model metadata text naming each checked guard's node."""
    return "\n".join(f"{node_name(k, g)}: {guard_outputs.describe(g)}" for k, g in enumerate(guards))
