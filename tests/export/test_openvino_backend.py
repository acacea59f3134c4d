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
        with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):   # eager's own error
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
    from tracejit.backends.openvino import MAX_STATIC
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
    from tracejit.backends.openvino import MAX_STATIC
    fn, example, _ = WORKLOADS["mlp"]()
    program = tracejit.optimize_for_inference(trace(fn, example), backend="openvino", static_shapes=True)
    with torch.no_grad():
        for n in range(1, MAX_STATIC + 4):   # more batch sizes than the cache keeps
            x = torch.randn(n, 16)
            assert_close(program(x), fn(x), f"batch {n}")
    assert len(program._static) == MAX_STATIC
    fresh = tracejit.optimize_for_inference(trace(fn, example), backend="openvino", static_shapes=True)
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):   # the traced program's
        fresh(torch.randn(3, 5))
    # refused by the shape check before the cache: neither compiled nor remembered as passing
    assert ((3, 5),) not in fresh._static and ((3, 5),) not in fresh._shapes_ok


@pytest.mark.parametrize("static_shapes", [False, True])
def test_shapes_the_model_cannot_take_raise_at_one_inference_thread(static_shapes):
    """OpenVINO's CPU plugin with one inference thread ran a [3, 5] input through the MLP's first linear (16
    features) and returned an empty [0, 8] tensor, no error: the backend checks the call's shapes itself."""
    fn, example, _ = WORKLOADS["mlp"]()
    program = tracejit.optimize_for_inference(trace(fn, example), backend="openvino", threads=1,
                                              static_shapes=static_shapes)
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):   # refused: the traced
        program(torch.randn(3, 5))                                                         # program's, eager's error
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        program(torch.randn(2, 16, 1))   # another rank: the traced program's call, eager's error
    with torch.no_grad():   # good shapes still answer, the bad ones were not remembered as passing
        for n in (1, 3, 7):
            x = torch.randn(n, 16)
            assert_close(program(x), fn(x), f"batch {n}")
    assert len(program._shapes_ok) == 3


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


def _native_bf16() -> bool:
    import openvino as ov
    return "BF16" in [str(c).upper() for c in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]


def _relative_l2(actual, expected) -> float:
    return max(float((a.float() - e.float()).norm() / e.float().norm().clamp_min(1e-12))
               for a, e in zip(as_tuple(actual), as_tuple(expected)))


@pytest.mark.skipif(not _native_bf16(), reason="this CPU has no native bf16 (OpenVINO's BF16 capability)")
@pytest.mark.parametrize("name", ["mlp", "transformer_encoder", "resnet_bottleneck", "bert_tiny"])
def test_bf16_is_an_opt_in_within_bf16_error_of_eager_on_new_shapes(name):
    fn, example, new_inputs = WORKLOADS[name]()
    traced = trace(fn, example)
    low = tracejit.optimize_for_inference(traced, backend="openvino", precision="bf16")
    full = tracejit.optimize_for_inference(traced, backend="openvino")
    assert "bfloat16" in str(low.compiled.get_property("INFERENCE_PRECISION_HINT"))
    assert "float32" in str(full.compiled.get_property("INFERENCE_PRECISION_HINT"))
    assert "bf16" in repr(low) and "bf16" not in repr(full)
    with torch.no_grad():
        reference = torch.jit.trace(fn, example, check_trace=False)
        errors = []
        for inputs in new_inputs:
            want = fn(*inputs)
            got = low(*inputs)
            assert [g.dtype for g in as_tuple(got)] == [w.dtype for w in as_tuple(want)]   # fp32 out, as traced
            assert [g.shape for g in as_tuple(got)] == [w.shape for w in as_tuple(want)]
            errors.append(_relative_l2(got, want))
            assert errors[-1] < 3e-2, f"{name}: bf16 relative L2 error {errors[-1]:.1e} vs eager"
            assert _relative_l2(got, reference(*inputs)) < 3e-2
            assert _relative_l2(full(*inputs), want) < 1e-5
    # the opt-in really computes in bf16: its error is far above fp32's (1e-7)
    assert max(errors) > 1e-5, f"{name}: bf16 errors {errors} look like fp32"


def test_bf16_with_static_shapes_keeps_the_precision():
    if not _native_bf16():
        pytest.skip("this CPU has no native bf16")
    fn, example, new_inputs = WORKLOADS["bert_tiny"]()
    program = tracejit.optimize_for_inference(trace(fn, example), backend="openvino", precision="bf16",
                                              static_shapes=True)
    with torch.no_grad():
        for inputs in new_inputs:
            assert _relative_l2(program(*inputs), fn(*inputs)) < 3e-2
    compiled = [v for v in program._static.values() if v is not None]
    assert compiled and program.config["INFERENCE_PRECISION_HINT"] == "bf16"


def test_unknown_precision_and_a_cpu_without_bf16_are_refused_clearly():
    from tracejit.backends import openvino as openvino_backend
    fn, example, _ = WORKLOADS["mlp"]()
    traced = trace(fn, example)
    with pytest.raises(ValueError, match=r"precision='int4' is not supported; expected one of \['bf16', 'f32'\]"):
        tracejit.optimize_for_inference(traced, backend="openvino", precision="int4")

    class CoreWithoutBf16:
        def get_property(self, device, name):
            assert (device, name) == ("CPU", "OPTIMIZATION_CAPABILITIES")
            return ["FP32", "INT8", "BIN"]

    with pytest.raises(ValueError, match=r"this CPU has no native bf16 \(OpenVINO's CPU capabilities: FP32, INT8, "
                                         r"BIN\); use precision='f32'"):
        openvino_backend._require_native(CoreWithoutBf16(), "bf16")
    with pytest.raises(TypeError, match="takes no options"):
        tracejit.optimize_for_inference(traced, precision="bf16")   # the torch backend has no such option


def test_a_float64_program_is_refused_rather_than_computed_in_float32():
    """OpenVINO's CPU plugin computes float64 as float32: 1e300 * 2 came back as 3.4e38."""
    def f(x):
        return x.double() * 1e300   # the line the error names
    traced = trace(f, (torch.randn(3),))
    assert torch.isfinite(f(torch.ones(3))).all() and f(torch.ones(3)).dtype == torch.float64
    with pytest.raises(ValueError, match=r"computes in float64 \(made at .*test_openvino_backend.py:\d+\).*backend='onnxruntime'"):
        tracejit.optimize_for_inference(traced, backend="openvino")
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")   # onnxruntime keeps float64
    torch.testing.assert_close(program(torch.ones(3)), f(torch.ones(3)))
    model = nn.Linear(3, 2).double().eval()
    with pytest.raises(ValueError, match="float64"):
        tracejit.optimize_for_inference(trace(model, (torch.randn(2, 3, dtype=torch.float64),)), backend="openvino")
