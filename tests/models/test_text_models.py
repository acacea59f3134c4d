"""BERT, GPT-2 and LLaMA (tiny, random weights) traced with tracejit.

Every model: eager's output is sensitive to the inputs (ids and attention mask), the trace
(no_grad, check_trace on) equals eager on the example and on ALT inputs with other values,
batch sizes, sequence lengths and right padding (the example mask is all ones), its warnings
and ledger agree and point at transformers' source, and the saved trace loaded in a fresh
process equals eager again. BERT and LLaMA run with both the default (sdpa) and the eager
attention implementations.
"""
from __future__ import annotations

import warnings

import torch

import tracejit
from model_corpus import (assert_outputs_equal, built_case, check_alt, check_example, check_fresh_process,
                          check_fresh_process_graph_and_ledger, check_gradients, check_sensitivity,
                          check_specialization, check_warnings_and_ledger, run)

from corpus_tests import (test_gradients_equal_eager, test_loaded_in_fresh_process_equals_eager,  # noqa: F401
                          test_loaded_inlined_graph_equals_traced, test_sensitivity,
                          test_specialization_warned_and_in_ledger, test_traced_equals_eager_on_alt,
                          test_traced_equals_eager_on_example, test_warnings_match_ledger)

MODELS = ["bert", "bert_eager_attn", "gpt2", "llama", "llama_eager_attn"]


def test_check_inputs_with_other_shapes_and_padding():
    """check_inputs of other batch sizes / lengths / padding: the checker's retraces agree."""
    case = built_case("gpt2")
    checks = [case.inputs["longer_padded"], case.inputs["shorter_padded"]]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)   # checked in test_warnings_match_ledger
        traced = tracejit.trace(case.wrapper, case.example, check_inputs=checks)
    for name in ("longer_padded", "shorter_padded"):
        assert_outputs_equal(run(traced, case.inputs[name]), case.eager(name), name)


def test_optimized_gpt2_keeps_eagers_bits_on_new_inputs_as_jit_freeze_does():
    """issue #25 item 3: optimize_for_inference is as exact as torch.jit's freeze. GPT-2's tanh-GELU
    (0.5 * x * (1 + tanh(...))) stays torch's tanh, and the arithmetic around it that a numpy kernel runs
    is exact: the optimized program gives eager's bits on other batch sizes and lengths, as torch.jit's
    freeze + optimize_for_inference does on its example (numpy's float32 tanh put it 7e-7 off)."""
    from model_corpus import max_abs_diff, traced_case
    case = traced_case("gpt2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = tracejit.optimize_for_inference(case.traced)
        jit_frozen = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(case.wrapper, case.example)))
    assert max_abs_diff(run(jit_frozen, case.example), case.eager("example")) == 0.0
    assert max_abs_diff(run(program, case.example), case.eager("example")) == 0.0
    for alt in case.spec.alts:
        assert max_abs_diff(run(program, case.inputs[alt]), case.eager(alt)) == 0.0, alt
