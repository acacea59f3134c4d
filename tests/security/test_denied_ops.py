"""The ops a file may never name (serialize/schema_check.is_denied_op): plain string tests that give what the
regular expression they replaced (DENIED_OP_RE) gives, on every ATen op name of this torch and on names built
from the rule's own fragments, anchored and not."""
from __future__ import annotations

import re

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tracejit.serialize import schema_check
from tracejit.serialize.schema_check import DENIED_OP_RE, is_denied_op

_RULE = re.compile(DENIED_OP_RE)
_FRAGMENTS = sorted({p.strip("^$?_") for p in DENIED_OP_RE.split("|")} | {"_", "set", "add", "x", "\n", "_?"})


def test_every_aten_op_name_is_refused_or_not_as_the_pattern_says():
    names = {s.name.split("::", 1)[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::")}
    assert len(names) > 1000
    denied = {n for n in names if is_denied_op(n)}
    assert denied == {n for n in names if _RULE.search(n)}
    # the rule does refuse what it is for, and lets the everyday ops through
    assert {"_sparse_coo_tensor_unsafe", "set_", "_make_per_tensor_quantized_tensor", "resize_", "is_pinned"} <= denied
    assert not denied & {"add", "matmul", "softmax", "layer_norm", "embedding", "reset", "offset", "subset"}


def test_every_pair_of_the_rules_fragments_is_refused_as_the_pattern_says():
    names = [a + b for a in _FRAGMENTS for b in _FRAGMENTS]
    assert [n for n in names if is_denied_op(n) != bool(_RULE.search(n))] == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), min_size=3, max_size=5).map("".join))
def test_longer_names_built_from_the_rules_fragments_are_refused_as_the_pattern_says(name):
    assert is_denied_op(name) == bool(_RULE.search(name)), name


def test_a_refused_op_name_is_a_load_error_naming_it():
    import pytest
    from tracejit.errors import LoadError
    with pytest.raises(LoadError, match=r"node 3: aten::_foreach_add is refused in files"):
        schema_check.check_op_name("_foreach_add", "node 3")
    schema_check.check_op_name("add", "node 3")
