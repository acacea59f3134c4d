"""Global torch state read by traced code (issue 20, item 1): guarded at the line, live and loaded.

Each pattern is first shown to move eager's output when the state changes; then the traced program
gives eager's answer in memory (a failed guard retraces) and a loaded one gives eager's answer or a
GuardError naming the line. torch.jit.trace returns the trace-time branch for every one of them.
"""
import contextlib
import io
import json

import pytest
import torch

import tracejit
from capture_testlib import assert_same, jit_trace, quiet_trace, round_trip


def grad_branch(x):                       # checkpointing / "only build the graph when training" helpers
    if torch.is_grad_enabled():
        return x * 2
    return x * 3


def autocast_branch(x):                   # transformers-style: cast to the autocast dtype when it is on
    if torch.is_autocast_enabled("cpu"):
        return x.to(torch.get_autocast_dtype("cpu")).float() + 1
    return x - 1


def default_dtype_branch(x):              # a factory dtype chosen from the default dtype
    if torch.get_default_dtype() == torch.float64:
        return x.double() * 2
    return x + 1


def deterministic_branch(x):              # a deterministic fallback (scatter vs. a sort-based path)
    if torch.are_deterministic_algorithms_enabled():
        return x.cumsum(0)
    return x.flip(0)


def inference_branch(x):
    if torch.is_inference_mode_enabled():
        return x.abs()
    return x.neg()


@contextlib.contextmanager
def default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@contextlib.contextmanager
def deterministic():
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old)


CASES = [
    (grad_branch, torch.no_grad),
    (autocast_branch, lambda: torch.autocast("cpu", dtype=torch.bfloat16)),
    (default_dtype_branch, lambda: default_dtype(torch.float64)),
    (deterministic_branch, deterministic),
    (inference_branch, torch.inference_mode),
]


@pytest.mark.parametrize("fn,state", CASES, ids=[c[0].__name__ for c in CASES])
def test_a_global_state_read_follows_the_state_at_call_time(fn, state):
    x = torch.randn(5, generator=torch.Generator().manual_seed(0))   # its own stream: earlier tests' draws vary
    plain = fn(x)
    with state():
        other = fn(x)
    assert not torch.equal(plain.float(), other.float()), "the state must move eager's output"

    traced = quiet_trace(fn, (x,))
    guards = [n.attrs["test"] for n in traced.graph.nodes if n.op == "tracejit::guard"]
    assert any(t.startswith(("torch.", "str(torch.")) for t in guards), guards
    assert_same(traced(x), plain, "same state")
    with state():
        assert_same(traced(x), other, "other state, in memory (retraced)")
    assert_same(traced(x), plain, "back to the first state")

    loaded = round_trip(tracejit.trace(fn, (x,)))
    assert_same(loaded(x), plain, "loaded, same state")
    with state(), pytest.raises(tracejit.GuardError, match=fn.__name__ and "read global torch state") as err:
        loaded(x)
    assert err.value.source is not None and err.value.source.lineno == fn.__code__.co_firstlineno + 1

    jit = jit_trace(fn, (x,))
    with state():
        stale = jit(x)
    assert not torch.equal(stale.float(), other.float()), "torch.jit.trace keeps the trace-time branch"


def test_a_read_inside_a_region_the_traced_code_opened_needs_no_guard():
    def f(x):
        with torch.no_grad():
            return x * (2 if torch.is_grad_enabled() else 7)
    traced = quiet_trace(f, (torch.randn(3),))
    assert not [n for n in traced.graph.nodes if n.op == "tracejit::guard" and n.attrs["kind"] == "state"]
    x = torch.randn(3)
    with torch.no_grad():
        assert_same(round_trip(traced)(x), f(x))


def test_readers_are_found_by_name_not_listed():
    from tracejit.ir.state_tests import readers
    names = readers()
    for name in ("is_grad_enabled", "is_autocast_enabled", "get_default_dtype", "get_autocast_dtype",
                 "are_deterministic_algorithms_enabled", "is_inference_mode_enabled", "get_float32_matmul_precision"):
        assert name in names
    assert "get_file_path" not in names and "get_rng_state" not in names


def test_a_file_naming_another_function_in_a_state_guard_is_refused():
    from capture_testlib import tampered

    def edit_to(test):
        def edit(doc):   # in place, as filesurgery expects
            new = json.loads(json.dumps(doc).replace('"torch.is_grad_enabled()"', json.dumps(test)))
            doc.clear()
            doc.update(new)
        return edit
    traced = tracejit.trace(grad_branch, (torch.randn(3),))
    for test in ("torch.manual_seed()", "torch.is_grad_enabled('x')", "__import__('os').getcwd()",
                 "str(torch.is_grad_enabled()"):
        with pytest.raises(tracejit.LoadError, match="guard"):
            tracejit.load(io.BytesIO(tampered(traced, edit_to(test))))


def test_other_threads_see_torch_s_own_readers():
    import threading
    seen = {}
    original = torch.is_grad_enabled

    def body(x):
        seen["inside"] = torch.is_grad_enabled
        t = threading.Thread(target=lambda: seen.setdefault("other", torch.is_grad_enabled()))
        t.start()
        t.join()
        return x * 2 if torch.is_grad_enabled() else x
    quiet_trace(body, (torch.randn(2),), allow_frozen_python_state=True)   # `seen`: a spy
    assert seen["other"] is True and torch.is_grad_enabled is original


# ---- the caller's autocast around a traced / optimized / loaded program -----------------------------
def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()


def test_every_torch_backend_program_follows_the_caller_s_autocast():
    m, x = _mlp(), torch.randn(4, 64)
    traced = quiet_trace(m, (x,))
    weight = m[0].weight.detach().clone()
    fn = quiet_trace(lambda a: torch.nn.functional.linear(a, weight).relu(), (x,))
    programs = {"traced": traced, "optimized": tracejit.optimize_for_inference(traced),
                "loaded": round_trip(traced), "loaded+optimized": tracejit.optimize_for_inference(round_trip(traced)),
                "frozen": tracejit.freeze(traced)}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        eager = m(x)
        assert eager.dtype == torch.bfloat16, "autocast must move eager's output"
        for name, program in programs.items():
            assert_same(program(x), eager, name)
        assert_same(tracejit.optimize_for_inference(fn)(x), torch.nn.functional.linear(x, weight).relu(), "function")
    for name, program in programs.items():   # and outside autocast, the fast path again
        assert_same(program(x), m(x), name + " outside autocast")


def test_an_exported_program_refuses_the_caller_s_autocast():
    pytest.importorskip("onnxruntime")
    m, x = _mlp(), torch.randn(4, 64)
    ort = tracejit.optimize_for_inference(quiet_trace(m, (x,)), backend="onnxruntime")
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(RuntimeError, match="called under torch.autocast"):
        ort(x)
    assert torch.allclose(ort(x), m(x), atol=1e-5)


def test_a_dtype_from_promote_types_of_a_traced_dtype_is_guarded():
    def f(x, y):
        dt = torch.promote_types(x.dtype, y.dtype)
        if dt == torch.float64:
            return (x + y) * 2
        return x + y
    a, b = torch.randn(3), torch.randn(3)
    traced = quiet_trace(f, (a, b))
    wide = (a.double(), b)
    assert not torch.equal(f(*wide), (a.double() + b)), "the dtypes move eager's answer"
    assert_same(traced(*wide), f(*wide), "in memory: retraced")
    with pytest.raises(tracejit.GuardError):
        round_trip(tracejit.trace(f, (a, b)))(*wide)
    jit = jit_trace(f, (a, b))
    assert not torch.equal(jit(*wide), f(*wide)), "torch.jit.trace keeps the float32 branch"
