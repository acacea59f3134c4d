"""The checks every model of the corpus gets, as test functions.

Each test module imports them and lists its models in ``MODELS``; conftest.py parametrizes
them per model (and per ALT input set / expected specialization).
"""
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


def test_gradients_equal_eager(model):
    check_gradients(model)
