"""dtype / device compared in Python (issue 10, item 1): guarded at the line of the read.

Each pattern is traced in float32 on cpu and called in float64 / bfloat16 / float16 / int64 and on
the meta device: in memory the traced program gives eager's answer (a failed guard retraces);
loaded from a file it gives eager's answer or raises GuardError naming the marked line.
torch.jit.trace keeps the traced branch (silently wrong: asserted, so the difference stays
documented). Reads that only flow into calls (``torch.ones(n, dtype=x.dtype)``, ``x.new_zeros``,
``torch.finfo(x.dtype).min``, ``.to(x.dtype)``) stay guard-free.
"""
import io

import pytest
import torch

import tracejit
from capture_testlib import assert_same, jit_trace, nodes_of, quiet_trace, round_trip, same, tampered


def line_of(marker: str) -> int:
    with open(__file__, encoding="utf-8") as fh:
        return next(i + 1 for i, text in enumerate(fh) if text.rstrip().endswith("# @" + marker))


def half_branch(x):
    if x.dtype == torch.float16:  # @half_branch
        return x * 2
    return x + 1


def low_precision_in(x):
    dt = x.dtype  # @low_precision_in
    if dt in (torch.half, torch.bfloat16):
        return x.float().softmax(-1).to(dt)
    return x.softmax(-1) * 2


def float_check(x):
    if not x.is_floating_point():  # @float_check
        x = x.float() / 10
    return x * 3


def dtype_property(x):
    return x * x.dtype.itemsize  # @dtype_property


def device_type(x):
    if x.device.type == "cpu":  # @device_type
        return x + 1
    return x * 2


def is_cpu_flag(x):
    return x + 1 if x.is_cpu else x * 2  # @is_cpu_flag


def upcast_helper(x):                      # dtype passed to a helper that compares it
    return _maybe_upcast(x, x.dtype)  # @upcast_helper


def _maybe_upcast(x, dtype):
    if dtype is torch.bfloat16:
        return x.double()
    return x + 0.5


NEW = [torch.randn(2, 5, dtype=torch.float64), torch.randn(2, 5).to(torch.bfloat16), torch.randn(2, 5).half(),
       torch.arange(10).reshape(2, 5), torch.randn(2, 5, device="meta"), torch.randn(3, 5)]

CASES = [half_branch, low_precision_in, float_check, dtype_property, device_type, is_cpu_flag, upcast_helper]


def _eager(fn, x):
    try:
        return fn(x)
    except (RuntimeError, NotImplementedError):   # an op eager cannot run on that dtype / device
        return None


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_in_memory_equals_eager_on_other_dtypes_and_devices(fn):
    traced = quiet_trace(fn, (torch.randn(2, 5),))
    for x in NEW:
        expected = _eager(fn, x)
        if expected is not None:
            assert_same(traced(x), expected, f"{fn.__name__} on {x.dtype} {x.device}")
    assert len(traced.specializations) >= 2   # some new input failed the guard


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_loaded_gives_eager_answer_or_guard_error_at_the_read(fn):
    loaded = round_trip(quiet_trace(fn, (torch.randn(2, 5),)))
    failures = 0
    for x in NEW:
        expected = _eager(fn, x)
        if expected is None:
            continue
        try:
            got = loaded(x)
        except tracejit.GuardError as e:
            failures += 1
            assert e.source.filename == __file__ and e.source.lineno == line_of(fn.__name__), str(e)
            assert "value at trace time" in str(e) and "value now" in str(e)
            continue
        assert_same(got, expected, f"{fn.__name__} on {x.dtype} {x.device}")
    assert failures > 0


@pytest.mark.parametrize("fn", [half_branch, low_precision_in, float_check, dtype_property, upcast_helper],
                         ids=lambda f: f.__name__)
def test_without_guards_and_with_torch_jit_trace_some_dtype_is_answered_wrongly(fn):
    """The new dtypes move the outcome: guards=False and torch.jit.trace replay the traced branch."""
    example = (torch.randn(2, 5),)
    unguarded = quiet_trace(fn, example, guards=False)
    jitted = jit_trace(fn, example)
    cpu_inputs = [x for x in NEW if x.device.type == "cpu" and _eager(fn, x) is not None]
    assert any(not same(unguarded(x), fn(x)) for x in cpu_inputs)
    assert jitted is not None and any(not same(jitted(x), fn(x)) for x in cpu_inputs)


def _relative_reads(x):
    n = x.shape[-1]
    a = torch.ones(n, dtype=x.dtype, device=x.device)
    b = x.new_zeros(n)
    low = torch.finfo(x.dtype).min
    return (x + a + b).clamp(min=low).to(x.dtype)


def _llama_mask(x):
    dtype, device = x.dtype, x.device
    n = x.shape[-1]
    return x + _full_mask(n, dtype, device)


def _full_mask(n, dtype, device):
    return torch.triu(torch.full((n, n), torch.finfo(dtype).min, dtype=dtype, device=device), 1)[0]


def _rms_norm(x):
    input_dtype = x.dtype
    h = x.to(torch.float32)
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(input_dtype)


@pytest.mark.parametrize("fn", [_relative_reads, _llama_mask, _rms_norm], ids=lambda f: f.__name__)
def test_reads_that_only_flow_into_calls_are_not_guarded(fn):
    traced = quiet_trace(fn, (torch.randn(2, 5),))
    kinds = {n.attrs["kind"] for n in traced.graph.nodes if n.op == "tracejit::guard"}
    assert not kinds & {"dtype", "device"}, kinds
    loaded = round_trip(traced)
    for x in (torch.randn(2, 5, dtype=torch.float64), torch.randn(3, 5).to(torch.bfloat16),
              torch.randn(2, 5, device="meta")):
        assert_same(loaded(x), fn(x), f"{fn.__name__} on {x.dtype} {x.device}")
    assert len(traced.specializations) == 1


def test_tampered_dtype_guard_names_are_load_errors():
    def edit(doc):
        guard = next(n for n in nodes_of(doc) if n["op"] == "tracejit::guard" and n["attrs"]["test"] == "dtype")
        guard["attrs"]["expected"] = "__import__('os')"
    raw = tampered(quiet_trace(half_branch, (torch.randn(2, 5),)), edit)
    with pytest.raises(tracejit.LoadError, match="dtype guard compares with a dtype name"):
        tracejit.load(io.BytesIO(raw))


def _mask_sdpa(n, device="cpu", **kwargs):          # takes device, swallows dtype in **kwargs it never reads
    return torch.zeros(n, device=device)


def _mask_eager(n, dtype=torch.float32, device="cpu", **kwargs):
    if dtype == torch.float16:
        return torch.ones(n, device=device)
    return torch.zeros(n, dtype=dtype, device=device)


MASKS = {"sdpa": _mask_sdpa, "eager": _mask_eager}


def _dispatch(x, impl):                            # transformers' mask_interface = ALL_MASK_ATTENTION_FUNCTIONS[...]
    dtype, device = x.dtype, x.device  # @dispatch
    mask_interface = MASKS[impl]
    return x + mask_interface(x.shape[-1], dtype=dtype, device=device)


@pytest.mark.parametrize("impl, guarded", [("sdpa", set()), ("eager", {"dtype"})])
def test_a_dispatch_table_callee_is_followed(impl, guarded):
    """The callee is found through the table it is assigned from after the read; a dtype swallowed by a
    **kwargs it never reads is unguarded, one it compares is guarded at the read's line."""
    def fn(x):
        return _dispatch(x, impl)
    traced = quiet_trace(fn, (torch.randn(2, 5),))
    guards = [n for n in traced.graph.nodes if n.op == "tracejit::guard" and n.attrs["kind"] in ("dtype", "device")]
    assert {n.attrs["kind"] for n in guards} == guarded
    assert all(n.source.lineno == line_of("dispatch") for n in guards)
    loaded = round_trip(traced)
    for x in (torch.randn(3, 5, dtype=torch.float64), torch.randn(2, 5, device="meta")):
        if guarded and x.dtype != torch.float32:   # (the device only reaches torch calls: not guarded)
            with pytest.raises(tracejit.GuardError):
                loaded(x)
        else:
            assert_same(loaded(x), fn(x))
