"""optimize_for_inference(backend="openvino"): eager's and torch.jit's trace's answers on new
shapes, the traced signature and output structure, no aliasing between calls, clear errors."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracejit
from workloads import WORKLOADS, as_tuple

pytest.importorskip("openvino")

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def trace(fn, example, **kw):
    with torch.no_grad():
        return tracejit.trace(fn, example, **kw)


def assert_close(actual, expected, what, atol=1e-5):
    actual, expected = as_tuple(actual), as_tuple(expected)
    assert len(actual) == len(expected), what
    for i, (a, e) in enumerate(zip(actual, expected)):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=atol, msg=lambda m, i=i: f"{what}: output {i}: {m}")


# atol: the transformer / conv nets' fp32 sums run in another order (OpenVINO fuses and blocks them)
@pytest.mark.parametrize("name,atol", [("mlp", 1e-5), ("elementwise", 1e-5), ("transformer_encoder", 3e-5),
                                       ("resnet_bottleneck", 3e-5), ("bert_tiny", 3e-5)])
def test_workload_gives_eager_and_jit_trace_answers_on_new_shapes(name, atol):
    fn, example, new_inputs = WORKLOADS[name]()
    program = tracejit.optimize_for_inference(trace(fn, example), backend="openvino")
    with torch.no_grad():
        reference = torch.jit.trace(fn, example, check_trace=False)
        for inputs in new_inputs:
            got = program(*inputs)
            assert_close(got, fn(*inputs), f"{name} openvino backend vs eager", atol)
            assert_close(got, reference(*inputs), f"{name} openvino backend vs torch.jit's trace", atol)


def test_compiled_for_cpu_with_latency_hint_fp32_and_torch_threads():
    fn, example, _ = WORKLOADS["mlp"]()
    program = tracejit.optimize_for_inference(trace(fn, example), backend="openvino")
    compiled = program.compiled
    assert str(compiled.get_property("PERFORMANCE_HINT")) == "LATENCY"
    assert compiled.get_property("INFERENCE_NUM_THREADS") == torch.get_num_threads()
    assert "float32" in str(compiled.get_property("INFERENCE_PRECISION_HINT"))   # not bf16, whatever the CPU
    assert program.model.inputs[0].get_partial_shape().is_dynamic   # the export's symbolic batch axis


def test_two_calls_results_do_not_alias():
    fn, example, _ = WORKLOADS["mlp"]()
    program = tracejit.optimize_for_inference(trace(fn, example), backend="openvino")
    x1, x2 = torch.randn(4, 16), torch.randn(4, 16)
    first = program(x1)
    kept = first.clone()
    second = program(x2)
    assert first.data_ptr() != second.data_ptr()
    torch.testing.assert_close(first, kept, rtol=0, atol=0)   # the second call did not overwrite it
    with torch.no_grad():
        assert_close(second, fn(x2), "second call")
    first.add_(1.0)   # writable, and writing to it does not disturb the next call
    with torch.no_grad():
        assert_close(program(x1), fn(x1), "after writing to an earlier result")


def test_dict_and_tuple_outputs_and_nested_inputs_are_kept():
    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(6, 4), nn.Linear(6, 3)

        def forward(self, pair, scale):
            x, y = pair
            h = torch.tanh(x * scale + y)
            return {"a": self.a(h), "pair": (self.b(h).relu(), h.sum(-1)), "n": 5}

    torch.manual_seed(4)
    model = Heads().eval()
    traced = trace(model, ((torch.randn(2, 6), torch.randn(2, 6)), torch.randn(6)), strict=False)
    program = tracejit.optimize_for_inference(traced, backend="openvino")
    pair, scale = (torch.randn(7, 6), torch.randn(7, 6)), torch.randn(6)
    with torch.no_grad():
        got, want = program(pair, scale), model(pair, scale)
    assert set(got) == set(want) and got["n"] == 5 and isinstance(got["pair"], tuple)
    assert_close(got["a"], want["a"], "dict output")
    assert_close(got["pair"], want["pair"], "tuple inside the dict")


def test_keyword_input_and_non_contiguous_grad_inputs():
    def f(x, *, bias):
        return (x.sin() + bias, x * 2)
    traced = trace(f, (torch.randn(3, 4),), example_kwarg_inputs={"bias": torch.randn(4)}, strict=False)
    program = tracejit.optimize_for_inference(traced, backend="openvino")
    x = torch.randn(4, 6).t().requires_grad_(True)   # (6, 4), transposed view
    bias = torch.randn(4)
    got = program(x, bias=bias)
    with torch.no_grad():
        assert_close(got, f(x, bias=bias), "keyword + non-contiguous input")


def test_wrong_arguments_give_the_onnxruntime_backends_errors():
    fn, example, _ = WORKLOADS["mlp"]()
    traced = trace(fn, example)
    for backend in ("onnxruntime", "openvino"):
        program = tracejit.optimize_for_inference(traced, backend=backend)
        with pytest.raises(TypeError, match=r"forward\(input: Tensor\[2d\]\).*should be a Tensor; got list"):
            program([1.0] * 16)
        with pytest.raises(RuntimeError, match=rf"{backend} could not run this call with Tensor\(shape=\(3, 5\)"):
            program(torch.randn(3, 5))
        with pytest.raises(TypeError, match="keyword arguments"):
            program(torch.randn(3, 16), extra=1)


def test_training_mode_module_is_refused():
    fn, example, _ = WORKLOADS["mlp"]()
    traced = trace(fn, example)
    traced.train()
    with pytest.raises(RuntimeError, match=r"training mode; the openvino backend.*\.eval\(\)"):
        tracejit.optimize_for_inference(traced, backend="openvino")


def test_unknown_backend_error_lists_openvino():
    fn, example, _ = WORKLOADS["mlp"]()
    with pytest.raises(ValueError, match=r"unknown backend 'nope'.*'torch', 'onnxruntime', 'openvino'"):
        tracejit.optimize_for_inference(trace(fn, example), backend="nope")


def test_missing_openvino_gives_an_install_hint(monkeypatch):
    import sys
    fn, example, _ = WORKLOADS["mlp"]()
    traced = trace(fn, example)
    monkeypatch.setitem(sys.modules, "openvino", None)   # import openvino raises ImportError
    with pytest.raises(ImportError, match=r"'openvino' which is not installed: pip install 'tracejit\[openvino\]'"):
        tracejit.optimize_for_inference(traced, backend="openvino")


def test_calls_from_several_threads_get_their_own_answers():
    from concurrent.futures import ThreadPoolExecutor
    fn, example, _ = WORKLOADS["mlp"]()
    program = tracejit.optimize_for_inference(trace(fn, example), backend="openvino")
    inputs = [torch.randn(n, 16) for n in (1, 3, 6, 2, 9, 4, 5, 7)]
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(program, inputs * 4))
    with torch.no_grad():
        for x, got in zip(inputs * 4, outs):
            assert_close(got, fn(x), "threaded call")


@pytest.mark.parametrize("model", ["bert", "gpt2", "llama", "t5", "whisper", "vit_interpolate", "resnet"])
def test_corpus_model_gives_eager_answers_on_alt_inputs(model):
    from model_corpus import assert_backend_gives_eager_answers
    assert_backend_gives_eager_answers(model, "openvino")


def test_scalar_integer_and_bool_tensors_keep_their_dtypes():
    def f(x, s, i):
        return x * s > 0.5, (i + 1) * 2, s * 3
    program = tracejit.optimize_for_inference(trace(f, (torch.randn(3, 4), torch.tensor(2.0), torch.arange(5))),
                                              backend="openvino")
    new = (torch.randn(6, 4), torch.tensor(0.3), torch.arange(9))
    got, want = program(*new), f(*new)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-6, atol=0)


@pytest.mark.parametrize("name,atol", [("mlp", 1e-5), ("transformer_encoder", 3e-5), ("bert_tiny", 3e-5)])
def test_static_shapes_compile_per_shape_and_give_eager_and_jit_answers(name, atol):
    from tracejit.export.openvino_backend import MAX_STATIC
    fn, example, new_inputs = WORKLOADS[name]()
    program = tracejit.optimize_for_inference(trace(fn, example), backend="openvino", static_shapes=True)
    with torch.no_grad():
        reference = torch.jit.trace(fn, example, check_trace=False)
        for inputs in [example] + list(new_inputs) + [example]:
            got = program(*inputs)
            assert_close(got, fn(*inputs), f"{name} static shapes vs eager", atol)
            assert_close(got, reference(*inputs), f"{name} static shapes vs torch.jit's trace", atol)
    shapes = {tuple(tuple(t.shape) for t in inputs) for inputs in [example] + list(new_inputs)}
    compiled = [k for k, v in program._static.items() if v is not None]
    assert len(compiled) == min(len(shapes), MAX_STATIC) and len(program._static) <= MAX_STATIC


def test_static_shapes_past_the_cache_run_dynamic_and_bad_shapes_keep_the_clear_error():
    from tracejit.export.openvino_backend import MAX_STATIC
    fn, example, _ = WORKLOADS["mlp"]()
    program = tracejit.optimize_for_inference(trace(fn, example), backend="openvino", static_shapes=True)
    with torch.no_grad():
        for n in range(1, MAX_STATIC + 4):   # more batch sizes than the cache keeps
            x = torch.randn(n, 16)
            assert_close(program(x), fn(x), f"batch {n}")
    assert len(program._static) == MAX_STATIC
    fresh = tracejit.optimize_for_inference(trace(fn, example), backend="openvino", static_shapes=True)
    with pytest.raises(RuntimeError, match=r"openvino could not run this call with Tensor\(shape=\(3, 5\)"):
        fresh(torch.randn(3, 5))
    assert fresh._static[((3, 5),)] is None   # refused once, remembered, the dynamic model reported it


def test_static_shapes_from_several_threads():
    from concurrent.futures import ThreadPoolExecutor
    fn, example, _ = WORKLOADS["mlp"]()
    program = tracejit.optimize_for_inference(trace(fn, example), backend="openvino", static_shapes=True)
    inputs = [torch.randn(n, 16) for n in (1, 3, 1, 3, 2, 1)] * 6
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(program, inputs))
    with torch.no_grad():
        for x, got in zip(inputs, outs):
            assert_close(got, fn(x), "threaded static call")
