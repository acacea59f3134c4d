"""The checks every model of the corpus gets, as test functions.

Each test module imports them and lists its models in ``MODELS``; conftest.py parametrizes
them per model (and per ALT input set / expected specialization).
"""
from model_corpus import traced_case
from model_corpus import (check_alt, check_example, check_fresh_process, check_fresh_process_graph_and_ledger,
                          check_gradients, check_sensitivity, check_specialization, check_warnings_and_ledger)


def test_sensitivity(model):
    check_sensitivity(model)


def test_traced_equals_eager_on_example(model):
    check_example(model)


def test_traced_equals_eager_on_alt(model, alt):
    check_alt(model, alt)


def test_warnings_match_ledger(model):
    check_warnings_and_ledger(model)


def test_specialization_warned_and_in_ledger(model, specialization):
    check_specialization(model, specialization)


def test_loaded_in_fresh_process_equals_eager(model, fresh_process_outputs):
    check_fresh_process(model, fresh_process_outputs)


def test_loaded_inlined_graph_equals_traced(model, fresh_process_outputs):
    check_fresh_process_graph_and_ledger(model, fresh_process_outputs)


def test_node_attributes_are_plain_data(model, fresh_process_outputs):
    """Every graph of the traced program and of the file a fresh process loaded (issue #24: a callee is
    named, live objects sit in the graph's tables; tests/arch/test_plain_attrs.py)."""
    from tracejit.ir import is_plain
    todo, seen, impure = [g for _, _, g in traced_case(model).traced.program.graphs()], set(), []
    while todo:
        g = todo.pop()
        if id(g) not in seen:
            seen.add(id(g))
            todo += list(g.callees.values())
            impure += [[n.op, k] for n in g.nodes for k, v in n.attrs.items() if not is_plain(v)]
    assert len(seen) > 1 and impure == []
    assert fresh_process_outputs["graphs"][model]["impure_attrs"] == []


def test_gradients_equal_eager(model):
    check_gradients(model)
