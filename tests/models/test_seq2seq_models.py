"""T5 and Whisper (full encoder-decoder, tiny, random weights) traced with tracejit.

T5 gets input_ids + attention_mask + decoder_input_ids; Whisper gets input_features +
decoder_input_ids. Both return (logits, encoder_last_hidden_state). The sensitivity check
changes the encoder side and the decoder side separately, so a trace that dropped either
would be caught.

Whisper cannot generalize to another mel frame count: its encoder checks
``input_features.shape[-1] != expected_seq_length`` (a size used as a Python int) and adds
position embeddings of a fixed length; eager raises ValueError for any other length. The trace
warns at that line, keeps it in the ledger, and the traced model fails loudly (not silently)
on another length. Its ALT inputs change the batch size and decoder length only.
"""
from __future__ import annotations

import pytest
import torch

from model_corpus import (WHISPER_FRAMES, WHISPER_MEL_BINS, check_alt, check_example, check_fresh_process,
                          check_fresh_process_graph_and_ledger, check_gradients, check_sensitivity,
                          check_specialization, check_warnings_and_ledger, traced_case)

from corpus_tests import (test_gradients_equal_eager, test_loaded_in_fresh_process_equals_eager,  # noqa: F401
                          test_loaded_inlined_graph_equals_traced, test_sensitivity,
                          test_specialization_warned_and_in_ledger, test_traced_equals_eager_on_alt,
                          test_traced_equals_eager_on_example, test_warnings_match_ledger)

MODELS = ["t5", "whisper"]


def test_whisper_frame_count_is_specialized():
    case = traced_case("whisper")
    _, entry = check_specialization("whisper", "frames")
    assert entry.value == WHISPER_FRAMES
    other = (torch.randn(1, WHISPER_MEL_BINS, WHISPER_FRAMES + 8), torch.randint(3, 100, (1, 3)))
    with torch.no_grad():
        with pytest.raises(ValueError, match="mel input features"):
            case.wrapper(*other)
        # the size guard fails; the traced module retraces on these inputs and meets eager's own error
        with pytest.raises(ValueError, match="mel input features"):
            case.traced(*other)
