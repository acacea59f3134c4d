"""tracejit.ir.target: a node's call target is one structured value, parsed and printed in one place."""
from __future__ import annotations

import io
import json
import struct

import pytest
import torch

import tracejit
from tracejit.ir import CallTarget, CallTargetError, Node, target_text
from tracejit.ir.target import KINDS

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def _every_kind(x):
    y = x.T.relu()                    # attr:T, method:relu
    z = torch.tanh(y) * 2             # fn:torch.tanh, method:mul
    k = x.shape[1] * 2                # method:size, op:* (arithmetic on a recorded size)
    return z[1, 1:3] * k + (-z).sum()  # index:select, index:slice, method:neg, method:sum


def _saved_targets(traced) -> list[str]:
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    raw = buf.getvalue()
    n = struct.unpack("<Q", raw[:8])[0]
    doc = json.loads(json.loads(raw[8:8 + n])["__metadata__"]["tracejit"])
    return [nd["target"] for g in doc["program"]["graphs"] for nd in g["nodes"]]


def test_traced_nodes_carry_structured_targets_of_every_kind():
    traced = tracejit.trace(_every_kind, torch.randn(4, 5))
    targets = [n.target for n in traced.graph.nodes if n.op.startswith("aten::")]
    assert all(isinstance(t, CallTarget) for t in targets)
    assert {t.kind for t in targets} == set(KINDS)
    texts = {str(t) for t in targets}
    assert {"attr:T", "method:relu", "fn:torch.tanh", "op:*", "index:select", "index:slice", "method:neg"} <= texts
    x = torch.randn(4, 5)
    torch.testing.assert_close(traced(x), _every_kind(x))
    torch.testing.assert_close(traced(x), torch.jit.trace(_every_kind, torch.randn(4, 5))(x))


def test_text_round_trips_and_the_file_keeps_the_text():
    traced = tracejit.trace(_every_kind, torch.randn(4, 5))
    for node in traced.graph.nodes:
        if node.target is not None:
            assert CallTarget.parse(str(node.target)) == node.target
    saved = _saved_targets(traced)
    assert saved == [target_text(n.target) for n in traced.graph.nodes]
    assert "" in saved and "fn:torch.tanh" in saved    # tracejit ops ("" in the file) and aten ops
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    loaded = tracejit.load(io.BytesIO(buf.getvalue()))
    assert [n.target for n in loaded.graph.nodes] == [n.target for n in traced.graph.nodes]
    x = torch.randn(4, 5)
    torch.testing.assert_close(loaded(x), _every_kind(x))


def test_parts_of_a_function_target():
    t = CallTarget.parse("fn:torch._C._nn.linear")
    assert (t.kind, t.name, t.namespace, t.short_name) == ("fn", "torch._C._nn.linear", "torch._C._nn", "linear")
    assert CallTarget.parse("op:r//") == CallTarget("op", "r//")     # ':' only splits once
    assert str(CallTarget("index", "setitem_index")) == "index:setitem_index"


@pytest.mark.parametrize("text,needle", [("weird:thing", "'weird' is not one of"), ("relu", "not of the form"),
                                         ("op:", "has no name"), (":relu", "'' is not one of"),
                                         (3, "not int")])
def test_malformed_text_is_a_clear_error(text, needle):
    with pytest.raises(CallTargetError, match=needle):
        CallTarget.parse(text)


def test_node_takes_a_target_or_its_text_and_none_for_tracejit_ops():
    assert Node("aten::neg.default", "method:neg").target == CallTarget("method", "neg")
    assert Node("tracejit::constant", "", attrs={"index": 0}).target is None
    assert Node("tracejit::constant", None, attrs={"index": 0}).target is None
    with pytest.raises(CallTargetError, match="call target kind 'meth'"):
        Node("aten::neg.default", "meth:neg")


def test_no_module_but_ir_target_splits_a_target():
    """The "kind:name" text is parsed in one place: elsewhere a target is read through its fields."""
    import pathlib
    import re
    root = pathlib.Path(tracejit.__file__).parent
    splitting = re.compile(r"\btarget\w*\.(r?partition|r?split|startswith|endswith)\(")
    offenders = [f"{p.relative_to(root)}:{i}" for p in root.rglob("*.py") if p != root / "ir" / "target.py"
                 for i, line in enumerate(p.read_text().splitlines(), 1) if splitting.search(line)]
    assert offenders == []
