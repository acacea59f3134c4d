"""passes/cuda_sibling_linears.py on real transformers (tiny, random weights), proved on the CPU: the pass and its
kernel's fast path let onto the CPU, both ways (float32's batched GEMM; bfloat16's column slices, used where
passes/sibling_slices.py proves every reader safe), the optimized program equals eager on every ALT input (other
batch sizes, lengths, padding, image sizes). On a GPU, tests/device runs the pass itself."""
from __future__ import annotations

import warnings

import pytest
import torch

import tracejit
from model_corpus import assert_outputs_equal, run, traced_case
from tracejit.kernels.cuda_sibling_linears import CudaSiblingLinears
from tracejit.passes import cuda_sibling_linears, pipeline
from tracejit.passes.cuda_sibling_linears import fuse_cuda_sibling_linears, sibling_linear_nodes

MODELS = ["bert", "llama", "t5", "whisper", "vit"]
# models whose attention reads its query, key and value only through a view that splits the last dim: sliced
# groups (LLaMA's rotary embedding and Whisper's scaling read them with elementwise ops: not proven, no slices)
SLICED = {"bert", "t5", "vit"}


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "sliced"])
def test_siblings_as_one_gemm_give_eagers_answers(monkeypatch, model, batched):
    monkeypatch.setattr(cuda_sibling_linears, "DEVICE_TYPE", "cpu")
    monkeypatch.setattr(cuda_sibling_linears, "BATCHED_DTYPES", (torch.float32,) if batched else ())
    monkeypatch.setattr(pipeline, "IN_MEMORY_PASSES", (("fuse_cuda_sibling_linears", fuse_cuda_sibling_linears),))
    calls = []
    monkeypatch.setattr(CudaSiblingLinears, "_fits",
                        lambda self, x: calls.append(1) or (x.dtype == self.weight.dtype and not x.requires_grad))
    case = traced_case(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        program = tracejit.optimize_for_inference(case.traced)
    groups = [n for graph in _graphs(program) for n in sibling_linear_nodes(graph)]
    if batched or model in SLICED:
        assert groups, f"{model}: no sibling linears found"
    elif not batched:
        assert not groups, f"{model}: column slices where a reader was not proven safe"
    for alt in case.spec.alts:
        assert_outputs_equal(run(program, case.inputs[alt]), case.eager(alt), f"{model}/{alt}")
    assert calls or not groups


def _graphs(program):
    """The graphs that run: each method's lowered graph."""
    return [m.run_graph for m in (getattr(program, "forward", None),) if m is not None and hasattr(m, "run_graph")]
