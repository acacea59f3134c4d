"""ViT and ResNet (tiny, random weights) traced with tracejit.

ResNet's convs are re-initialized He-normal and its BatchNorm statistics calibrated on random
data so its output depends on the input; it generalizes to other batch sizes and image sizes
(non-square too).

ViT is traced twice: as configured (``vit``), it checks ``height != self.image_size[0] or
width != self.image_size[1]`` (sizes used as Python ints) and adds position embeddings for one
image size: eager raises ValueError for another size; the trace warns at that line, keeps it in
the ledger and fails loudly on another size, so its ALT inputs change the batch size only.
With ``interpolate_pos_encoding=True`` (``vit_interpolate``) the position embeddings are
interpolated to the input's size and the trace generalizes to other image sizes.
"""
from __future__ import annotations

import pytest
import torch

from model_corpus import (check_alt, check_example, check_fresh_process, check_fresh_process_graph_and_ledger,
                          check_gradients, check_sensitivity, check_specialization, check_warnings_and_ledger,
                          traced_case)

from corpus_tests import (test_gradients_equal_eager, test_loaded_in_fresh_process_equals_eager,  # noqa: F401
                          test_loaded_inlined_graph_equals_traced, test_sensitivity,
                          test_specialization_warned_and_in_ledger, test_traced_equals_eager_on_alt,
                          test_traced_equals_eager_on_example, test_warnings_match_ledger)

MODELS = ["vit", "vit_interpolate", "resnet"]


def test_vit_image_size_is_specialized():
    case = traced_case("vit")
    _, entry = check_specialization("vit", "image_size")
    assert entry.value == 32
    other = torch.randn(1, 3, 48, 48)
    with torch.no_grad():
        with pytest.raises(ValueError, match="doesn't match model"):
            case.wrapper(other)
        # the size guard fails; the traced module retraces on these inputs and meets eager's own error
        with pytest.raises(ValueError, match="doesn't match model"):
            case.traced(other)
