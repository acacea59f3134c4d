"""optimize_for_inference(backend="onnxruntime"): the traced signature and output structure,
eager's answers on new shapes, session settings, clear errors."""
from __future__ import annotations

import onnxruntime as ort
import pytest
import torch

import tracejit
from workloads import WORKLOADS, as_tuple, assert_close

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def trace(fn, example, **kw):
    with torch.no_grad():
        return tracejit.trace(fn, example, **kw)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_workload_gives_eager_answers_on_new_shapes(name):
    fn, example, new_inputs = WORKLOADS[name]()
    traced = trace(fn, example)
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    for inputs in new_inputs:
        with torch.no_grad():
            expected = as_tuple(fn(*inputs))
            assert_close(as_tuple(program(*inputs)), expected, f"{name} onnxruntime backend vs eager")
            assert_close(as_tuple(program(*inputs)), as_tuple(traced(*inputs)), f"{name} vs traced")


def test_session_uses_torch_threads_and_all_graph_optimizations():
    fn, example, _ = WORKLOADS["mlp"]()
    program = tracejit.optimize_for_inference(trace(fn, example), backend="onnxruntime")
    options = program.session.get_session_options()
    assert options.intra_op_num_threads == torch.get_num_threads()
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert options.inter_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert program.session.get_providers() == ["CPUExecutionProvider"]


def test_nested_inputs_keywords_and_output_structure_are_kept():
    def f(pair, scale, *, bias):
        a, b = pair
        return {"sum": a + b * scale, "parts": (a.relu(), 7), "bias": bias * 2}
    example = ((torch.randn(2, 3), torch.randn(2, 3)), torch.randn(3))
    traced = trace(f, example, example_kwarg_inputs={"bias": torch.randn(1)}, strict=False)
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    pair, scale, bias = (torch.randn(4, 3), torch.randn(4, 3)), torch.randn(3), torch.randn(1)
    got, want = program(pair, scale, bias=bias), f(pair, scale, bias=bias)
    assert set(got) == set(want) and got["parts"][1] == 7
    for key in ("sum", "bias"):
        torch.testing.assert_close(got[key], want[key])
    torch.testing.assert_close(got["parts"][0], want["parts"][0])


def test_dict_input_and_python_constant_output():
    def f(d, x):
        return d["a"] * x, 3
    traced = trace(f, ({"a": torch.randn(2)}, torch.randn(2)), strict=False)
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    out = program({"a": torch.ones(5)}, torch.arange(5.0))
    assert out[1] == 3
    torch.testing.assert_close(out[0], torch.arange(5.0))


def test_inputs_that_need_grad_or_are_not_contiguous_are_accepted():
    fn, example, _ = WORKLOADS["mlp"]()
    program = tracejit.optimize_for_inference(trace(fn, example), backend="onnxruntime")
    x = torch.randn(16, 6).t().requires_grad_(True)   # (6, 16), transposed view
    with torch.no_grad():
        torch.testing.assert_close(program(x), fn(x), rtol=1e-4, atol=1e-4)


def test_wrong_arguments_give_clear_errors():
    fn, example, _ = WORKLOADS["mlp"]()
    program = tracejit.optimize_for_inference(trace(fn, example), backend="onnxruntime")
    with pytest.raises(TypeError, match=r"forward\(input: Tensor\[2d\]\).*should be a Tensor; got list"):
        program([1.0] * 16)
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):   # eager's own error
        program(torch.randn(3, 5))
    with pytest.raises(TypeError, match="keyword arguments"):
        program(torch.randn(3, 16), extra=1)


def test_unknown_backend_is_refused():
    fn, example, _ = WORKLOADS["mlp"]()
    with pytest.raises(ValueError, match="unknown backend 'tvm'"):
        tracejit.optimize_for_inference(trace(fn, example), backend="tvm")


def test_training_mode_module_is_refused():
    fn, example, _ = WORKLOADS["mlp"]()
    traced = trace(fn, example)
    traced.train()
    with pytest.raises(RuntimeError, match=r"training mode.*\.eval\(\)"):
        tracejit.optimize_for_inference(traced, backend="onnxruntime")


@pytest.mark.parametrize("model", ["bert", "gpt2", "llama", "t5", "whisper", "vit_interpolate", "resnet"])
def test_corpus_model_backend_gives_eager_answers_on_alt_inputs(model):
    from model_corpus import assert_backend_gives_eager_answers
    assert_backend_gives_eager_answers(model, "onnxruntime")


def _held_models(root, min_bytes: int, model_type) -> list:
    """Serialized models (bytes of at least ``min_bytes``) and ONNX protos reachable from ``root``
    (gc referents, not through modules or their globals, classes or onnxruntime's sessions: an ``InferenceSession`` made
    from bytes keeps them, for its provider fallback, beyond our reach)."""
    import gc
    import types

    import sys

    # a module's globals, reached through a function's ``__globals__``, are the module too: not walked
    seen = {id(root)} | {id(vars(m)) for m in list(sys.modules.values()) if m is not None}
    todo, found = [root], []
    while todo:
        obj = todo.pop()
        for ref in gc.get_referents(obj):
            if id(ref) in seen or isinstance(ref, (types.ModuleType, type, ort.InferenceSession)):
                continue
            seen.add(id(ref))
            if isinstance(ref, (bytes, bytearray)):
                if len(ref) >= min_bytes:
                    found.append(ref)
            elif isinstance(ref, model_type):
                found.append(ref)
            else:
                todo.append(ref)
    return found


def test_program_holds_its_model_once_and_answers_on_new_batches():
    """The program keeps the serialized model once (it held the ONNX proto and its bytes: the weights twice)."""
    onnx = pytest.importorskip("onnx")
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 32)).eval()
    weight_bytes = sum(p.numel() * 4 for p in model.parameters())
    program = tracejit.optimize_for_inference(trace(model, (torch.randn(4, 64),)), backend="onnxruntime")
    held = _held_models(program, weight_bytes, onnx.ModelProto)
    assert len(held) == 1, f"the model's weights are held {len(held)} times: {[type(h).__name__ for h in held]}"
    for batch in (4, 9):   # 9: the dynamic session, opened from the one copy kept
        x = torch.randn(batch, 64) * 2
        with torch.no_grad():
            assert_close(as_tuple(program(x)), as_tuple(model(x)), f"batch {batch}")
