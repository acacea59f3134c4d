"""Size guards ONNX cannot check are checked by tracejit's onnxruntime / OpenVINO programs (backends/onnx_call.py).

A comparison on an input size, ``(n - 1).bit_length()``, a float computed from sizes used as a key, a value
read of a tensor made from sizes alone (export/guards.py) and a comparison on the size of an intermediate tensor (checked on meta tensors: backends/intermediate_sizes.py) are
guards no ONNX model can hold (export/guards.py: the standalone file keeps the traced branch, warns and lists
them in its metadata). The programs of ``optimize_for_inference(backend=...)`` check them on each call's input
sizes first: eager's answer where the guard holds (also for sizes other than the trace's); where one fails the
call goes to the traced program, whose guards decide: a live object traces again (eager's answer), a loaded one
or one whose original was dropped raises the GuardError naming the line.
"""
from __future__ import annotations

import io
import warnings

import pytest
import torch

import tracejit
from tracejit.passes.inline import inline_calls
from tracejit.runtime import specialize

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")
BACKENDS = ["onnxruntime", "openvino"]


def longer_than_two(x):
    if x.size(0) > 2:  # @longer_than_two
        return x * 2
    return x - 1


def bit_length_bucket(x):
    bucket = 1 << (x.size(0) - 1).bit_length()  # @bit_length_bucket
    return x * bucket


def half_size_key(x):
    scale = {1.5: 2.0, 2.0: 3.0}.get(x.size(0) / 2, 1.0)  # @half_size_key
    return x * scale


def intermediate_view(x):                # the size of an intermediate: a function of the input sizes
    h = x.reshape(-1)
    if h.shape[0] > 6:  # @intermediate_view
        return h * 2
    return h - 1


W = torch.randn(3, 2)


def intermediate_linear(x):              # through an op with a captured weight (a constant on meta)
    h = torch.nn.functional.linear(x, W).flatten()
    if h.size(0) > 9:  # @intermediate_linear
        return h * 2
    return h - 1


def data_dependent_count(x):             # the size of nonzero's result depends on the values: a guard output
    idx = (x > 0).nonzero()
    if idx.shape[0] > 2:  # @data_dependent_count
        return x * 2
    return x - 1


def level_scale(x):                      # torchvision's pooler scale: a value guard computed from sizes alone
    half = x[: x.size(0) // 2]
    scale = float(torch.tensor(half.size(0) / x.size(0)).log2().round())  # @level_scale
    return x * scale


# (function, example size, sizes where the guard holds, sizes where it fails)
CASES = {
    "level_scale": (level_scale, 4, [6, 5, 8], [3, 1]),
    "intermediate_view": (intermediate_view, 4, [5, 9], [3, 2]),
    "intermediate_linear": (intermediate_linear, 4, [5, 7], [3, 1]),
    "longer_than_two": (longer_than_two, 3, [6, 9], [2, 1]),
    "bit_length_bucket": (bit_length_bucket, 3, [], [5, 2]),   # the guard is on n - 1 itself
    "half_size_key": (half_size_key, 3, [], [4, 5]),
}


def line_of(name: str) -> int:
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# @{name}"))


def program_for(name, backend, loaded):
    """``loaded``: True (from a file), False (live) or "dropped" (live, its original dropped)."""
    pytest.importorskip(backend)
    fn, n, _, _ = CASES[name]
    traced = tracejit.trace(fn, (torch.randn(n, 2),), check_trace=False)
    if loaded == "dropped":
        specialize.drop_original(traced)
    elif loaded:
        buf = io.BytesIO()
        tracejit.save(traced, buf)
        buf.seek(0)
        traced = tracejit.load(buf)
    return fn, tracejit.optimize_for_inference(traced, backend=backend)


@pytest.mark.parametrize("loaded", [False, True, "dropped"], ids=["live", "loaded", "dropped"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_backend_checks_the_size_guards_onnx_cannot(name, backend, loaded):
    fn, program = program_for(name, backend, loaded)
    _, n, holds, fails = CASES[name]
    assert program.size_guards is not None
    for size in [n] + holds:
        x = torch.randn(size, 2)
        torch.testing.assert_close(program(x), fn(x))
    for size in fails:
        x = torch.randn(size, 2)
        traced_answer = tracejit.trace(fn, (torch.randn(n, 2),), check_trace=False, guards=False)(x)
        assert not torch.allclose(traced_answer, fn(x))   # the size moves eager's answer off the traced branch
        if loaded is False:   # the traced program traces again
            torch.testing.assert_close(program(x), fn(x))
            continue
        with pytest.raises(tracejit.GuardError) as info:
            program(x)
        assert (info.value.source.filename, info.value.source.lineno) == (__file__, line_of(name)), str(info.value)
        assert f"test_backend_size_guards.py:{line_of(name)}" in str(info.value)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_standalone_onnx_file_checks_them_itself(name):
    """Without a backend in front of it, the exported model checks each such guard in the graph
    (export/guard_checks.py): eager's answer where it holds, a failed run naming the line where it fails (before:
    the traced branch's answer for every size, a warning at export)."""
    ort = pytest.importorskip("onnxruntime")
    fn, n, holds, fails = CASES[name]
    traced = tracejit.trace(fn, (torch.randn(n, 2),), check_trace=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", tracejit.TracerWarning)
        proto = tracejit.export_onnx(traced)
    meta = {p.key: p.value for p in proto.metadata_props}
    assert f"test_backend_size_guards.py:{line_of(name)}" in meta["tracejit.checked_guards"]
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for size in [n] + holds:
        x = torch.randn(size, 2)
        torch.testing.assert_close(torch.from_numpy(session.run(None, {"x": x.numpy()})[0]), fn(x))
    for size in fails:
        with pytest.raises(Exception, match=rf"tracejit_guard_\d+_failed_at_\S*test_backend_size_guards.py:"
                                            rf"{line_of(name)}"):
            session.run(None, {"x": torch.randn(size, 2).numpy()})


def test_a_program_without_such_guards_calls_the_model_directly():
    pytest.importorskip("onnxruntime")
    traced = tracejit.trace(lambda x: x.view(x.size(0), -1) * 2, (torch.randn(3, 2, 2),), check_trace=False)
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    assert getattr(program, "size_guards", None) is None
    x = torch.randn(7, 2, 2)
    torch.testing.assert_close(program(x), x.view(7, -1) * 2)


class Flattened(torch.nn.Module):        # a parameter in the slice: read on meta
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 4)

    def forward(self, x):
        h = self.lin(x).flatten()
        if h.size(0) > 10:  # @flattened_module
            return h * 2
        return h - 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_intermediate_size_guard_of_a_module(backend):
    pytest.importorskip(backend)
    torch.manual_seed(0)
    model = Flattened().eval()
    traced = tracejit.trace(model, (torch.randn(3, 2),), check_trace=False)
    program = tracejit.optimize_for_inference(traced, backend=backend)
    x = torch.randn(5, 2)
    torch.testing.assert_close(program(x), model(x))
    x = torch.randn(2, 2)
    torch.testing.assert_close(program(x), model(x))   # the live traced program traced again
    fresh = tracejit.trace(model, (torch.randn(3, 2),), check_trace=False)
    fresh.drop_original()   # no original: the GuardError naming the line
    program = tracejit.optimize_for_inference(fresh, backend=backend)
    with pytest.raises(tracejit.GuardError) as info:
        program(torch.randn(2, 2))
    assert info.value.source.lineno == line_of("flattened_module")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_guard_on_a_data_dependent_size_is_checked_by_the_models_guard_output(backend):
    """No check before the run can decide it (nonzero's size follows the values): the model computes it as a
    guard output (export/guard_outputs.py); where it is False the traced program answers (a live one traces
    again: eager's answer) and, once it holds no original, raises its GuardError naming the line
    (tests/export/test_guard_outputs.py checks the file)."""
    pytest.importorskip(backend)
    traced = tracejit.trace(data_dependent_count, (torch.tensor([1.0, 2.0, 3.0, -1.0]),), check_trace=False)
    x = torch.tensor([1.0, -2.0, -3.0, -1.0])
    assert not torch.equal(tracejit.trace(data_dependent_count, (torch.tensor([1.0, 2.0, 3.0, -1.0]),),
                                          check_trace=False, guards=False)(x), data_dependent_count(x))
    program = tracejit.optimize_for_inference(traced, backend=backend)
    held = torch.tensor([-5.0, 4.0, 7.0, 0.5, 2.0])   # another length and values, still over 2 positives
    torch.testing.assert_close(program(held), data_dependent_count(held))
    torch.testing.assert_close(program(x), data_dependent_count(x))   # the traced program traced again
    gone = tracejit.trace(data_dependent_count, (torch.tensor([1.0, 2.0, 3.0, -1.0]),), check_trace=False)
    gone.drop_original()   # as a loaded program
    program = tracejit.optimize_for_inference(gone, backend=backend)
    with pytest.raises(tracejit.GuardError, match=f"test_backend_size_guards.py:{line_of('data_dependent_count')}"):
        program(x)


def test_a_signature_that_passed_skips_the_meta_check_and_a_failing_one_still_raises():
    """The meta check's answer is a function of the call's shapes, strides and dtypes: a signature seen to pass
    is not checked again (BERT-base's 557-node slice cost a quarter of a call); one that fails raises every time,
    also after passing ones were remembered."""
    pytest.importorskip("onnxruntime")
    fn, program = program_for("intermediate_view", "onnxruntime", "dropped")
    runs = []
    check = program.size_guards
    passed = program.size_guard_signatures

    def counting(*args, **kwargs):
        runs.append(1)
        return check(*args, **kwargs)

    for size in (5, 5, 9, 5, 9):
        x = torch.randn(size, 2)
        with torch.no_grad():
            assert passed.check(counting, (x,), {}) is None
        torch.testing.assert_close(program(x), fn(x))
    assert len(runs) == 2 and len(passed.seen) == 2   # 5 and 9: checked once each
    for _ in range(2):
        with pytest.raises(tracejit.GuardError):
            program(torch.randn(3, 2))
    assert len(passed.seen) == 2
    x = torch.randn(5, 2).t().contiguous().t()        # other strides: checked on their own
    passed.check(counting, (x,), {})
    assert len(runs) == 3


def two_rows(x):
    a, b = x.unbind(0)  # @two_rows
    h = (a + b).reshape(-1)
    if h.shape[0] > 3:
        return h * 2
    return h - 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_pinned_count_fails_with_the_guard_before_later_checks(backend):
    """The number of pieces ``unbind`` unpacks pins the input's first dimension (a static ONNX dimension); the
    program that checks the intermediate size guard first checks that one, so another count raises the
    GuardError naming the unbind line, not Python's "too many values to unpack" from the check's slice."""
    pytest.importorskip(backend)
    traced = tracejit.trace(two_rows, (torch.randn(2, 4),), check_trace=False)
    specialize.drop_original(traced)
    program = tracejit.optimize_for_inference(traced, backend=backend)
    x = torch.randn(2, 5)
    torch.testing.assert_close(program(x), two_rows(x))
    with pytest.raises(tracejit.GuardError, match=f"test_backend_size_guards.py:{line_of('two_rows')} "):
        program(torch.randn(3, 4))


def test_the_signature_of_plain_positional_tensors_is_the_general_key():
    """Positional plain tensors take a short path to the signature key (no pytree walk); it is the key the
    general path gives the same leaves, so a remembered pass means the same thing on both paths, and shapes,
    strides and dtypes still tell calls apart."""
    from tracejit.backends.intermediate_sizes import signature
    x, y = torch.randn(4, 3), torch.arange(6).reshape(2, 3)
    as_kwargs = signature((), {"a": x, "b": y})           # the general path (keyword arguments)
    assert signature((x, y), {}) == as_kwargs == ((x.dtype, x.shape, x.stride()), (y.dtype, y.shape, y.stride()))
    assert signature((torch.nn.Parameter(x), y), {}) == as_kwargs   # a subclass: the general path, same key
    others = [(x.t(), y), (x.double(), y), (x[:2], y), (x, y.float())]
    assert len({signature(o, {}) for o in others} | {as_kwargs}) == len(others) + 1
    assert signature((x, [y, 2]), {}) == ((x.dtype, x.shape, x.stride()), (y.dtype, y.shape, y.stride()), (int, 2))


def inverse_permutation_rows(x):
    order = x[:, 0].sort().indices
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel())   # written in place: garbage without this line
    y = x[inverse]
    if y.size(0) > 2:  # @inverse_permutation_rows
        return y * 2
    return y - 1


def test_the_slice_of_a_size_guard_keeps_the_writes_into_its_values():
    """transformers' mixture of experts (Mixtral): ``p = empty_like(order); p[order] = arange(n); h[p]``. The slice
    that checks a size guard on ``h[p]`` dropped the write and indexed with uninitialised memory (IndexError on
    the real tensors); the onnxruntime program of Mixtral failed on every call."""
    from tracejit.backends import intermediate_sizes
    from tracejit.passes.inline import inline_calls
    traced = tracejit.trace(inverse_permutation_rows, (torch.randn(4, 3),))
    graph = inline_calls(traced.graph)
    producers = {id(v): n for n in graph.nodes for v in n.outputs if v is not None}
    guard = next(n for n in graph.nodes if n.op == "tracejit::guard" and n.attrs.get("kind") == "size")
    ops = {n.op for n in intermediate_sizes.tensor_slice(guard, producers, graph.nodes).values()}
    assert "aten::index_put_.default" in ops and "aten::arange.default" in ops, ops
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    for rows in (4, 6, 2):
        x = torch.randn(rows, 3)
        torch.testing.assert_close(program(x), inverse_permutation_rows(x))


SCALE_GLOBAL = 2.0


class FlaggedView(torch.nn.Module):      # a meta-checked size guard and Python state read in forward
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 4)
        self.double = True

    def forward(self, x):
        h = self.lin(x).flatten()
        if h.size(0) > 10:  # @flagged_size
            h = h + 1
        if self.double:  # @flagged_attribute
            h = h * 2
        return h * SCALE_GLOBAL  # @flagged_global


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_state_is_checked_on_every_call_after_a_signature_passed(backend):
    """The meta size check is remembered per input signature; the module attribute and global it also guards are
    not a function of the signature: set after the first calls, they give eager's answer (live) or the GuardError
    naming their line (original dropped), never the traced branch (which answered 2x before this was split)."""
    global SCALE_GLOBAL
    pytest.importorskip(backend)
    torch.manual_seed(0)
    model = FlaggedView().eval()
    program = tracejit.optimize_for_inference(tracejit.trace(model, (torch.randn(3, 2),), check_trace=False),
                                              backend=backend)
    fresh = tracejit.trace(model, (torch.randn(3, 2),), check_trace=False)
    fresh.drop_original()
    dropped = tracejit.optimize_for_inference(fresh, backend=backend)
    assert program.state_guards is not None and len(program.size_guard_signatures.seen) == 0
    calls = [torch.randn(3, 2), torch.randn(5, 2)]   # the traced shape (known to pass) and one remembered
    for p in (program, dropped):
        for x in calls * 2:
            torch.testing.assert_close(p(x), model(x))
    assert len(program.size_guard_signatures.seen) == 1
    try:
        for x in calls:
            model.double = False
            torch.testing.assert_close(program(x), model(x))   # the live traced program traced again
            with pytest.raises(tracejit.GuardError) as info:
                dropped(x)
            assert info.value.source.lineno == line_of("flagged_attribute")
            model.double = True
            SCALE_GLOBAL = 3.0
            torch.testing.assert_close(program(x), model(x))
            with pytest.raises(tracejit.GuardError) as info:
                dropped(x)
            assert info.value.source.lineno == line_of("flagged_global")
            SCALE_GLOBAL = 2.0
    finally:
        model.double, SCALE_GLOBAL = True, 2.0


def grad_mode_branch(x):
    if torch.is_grad_enabled():  # @grad_mode_branch
        return x * 2
    return x + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_state_read_in_forward_is_checked_per_call(backend):
    """``torch.is_grad_enabled()`` read in forward: traced under no_grad, the exported model holds the no-grad
    branch; a call with grad on gets eager's answer (live) or the GuardError naming the line (dropped), checked
    outside the size check's own no_grad."""
    pytest.importorskip(backend)
    x = torch.randn(4)
    with torch.no_grad():
        traced = tracejit.trace(grad_mode_branch, (x,), check_trace=False)
        fresh = tracejit.trace(grad_mode_branch, (x,), check_trace=False)
    fresh.drop_original()
    program = tracejit.optimize_for_inference(traced, backend=backend)
    dropped = tracejit.optimize_for_inference(fresh, backend=backend)
    y = torch.randn(4)
    with torch.no_grad():
        torch.testing.assert_close(program(y), y + 1)
        torch.testing.assert_close(dropped(y), y + 1)
    torch.testing.assert_close(program(y), grad_mode_branch(y))   # grad on: the live program traced again
    with pytest.raises(tracejit.GuardError) as info:
        dropped(y)
    assert info.value.source.lineno == line_of("grad_mode_branch")


class FastpathLayer(torch.nn.Module):
    """Reads a torch flag in forward, as each ``nn.MultiheadAttention`` of torchvision's ViT does."""

    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        if torch.backends.mha.get_fastpath_enabled():  # @fastpath_layer
            return x * self.factor
        return x + 1


FASTPATH_LAYERS = torch.nn.Sequential(FastpathLayer(2.0), FastpathLayer(3.0)).eval()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_state_read_repeated_in_forward_is_checked_once_per_call(backend):
    """The exported programs check the state before the run: one read of a torch flag answers for every read of it
    in forward, and it still decides each call (the first read's line is named)."""
    pytest.importorskip(backend)
    x = torch.randn(4)
    traced = tracejit.trace(FASTPATH_LAYERS, (x,), check_trace=False)
    fresh = tracejit.trace(FASTPATH_LAYERS, (x,), check_trace=False)
    fresh.drop_original()
    reads = [n for n in inline_calls(traced.graph).nodes if "get_fastpath_enabled" in str(n.attrs.get("test"))]
    assert len(reads) == 2   # the trace guards each layer's read
    program = tracejit.optimize_for_inference(traced, backend=backend)
    dropped = tracejit.optimize_for_inference(fresh, backend=backend)
    assert program.state_guards.code.count("get_fastpath_enabled() !=") == 1
    y = torch.randn(4)
    torch.testing.assert_close(program(y), y * 6)
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        torch.testing.assert_close(program(y), FASTPATH_LAYERS(y))   # the live program traced again: y + 2
        torch.testing.assert_close(program(y), y + 2)
        with pytest.raises(tracejit.GuardError) as info:
            dropped(y)
        assert info.value.source.lineno == line_of("fastpath_layer")
    finally:
        torch.backends.mha.set_fastpath_enabled(True)


def test_contiguous_tensors_of_the_traced_shapes_skip_the_signature_key():
    """The check passed on contiguous meta tensors of the traced shapes at build (``remember_traced``): such a call
    skips it without a key; another shape, dtype or strides still takes the key (and the check once)."""
    pytest.importorskip("onnxruntime")
    fn, program = program_for("intermediate_view", "onnxruntime", "dropped")
    passed = program.size_guard_signatures
    assert passed.traced == ((torch.Size([4, 2]), torch.float32),)
    runs = []

    def counting(*args, **kwargs):
        runs.append(1)
        return program.size_guards(*args, **kwargs)

    x = torch.randn(4, 2)
    for args in [(x,), (x,), (torch.randn(2, 4).t(),), (x.double(),), (torch.randn(5, 2),)]:
        passed.check(counting, args, {})
    assert len(runs) == 3 and len(passed.seen) == 3   # the traced one never ran; the other three once each
    with pytest.raises(tracejit.GuardError):
        program(torch.randn(3, 2))


def keyword_view(x, *, bias):
    h = x.reshape(-1)
    if h.shape[0] > 6:  # @keyword_view
        return h * 2 + bias.sum()
    return h - 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_keyword_left_out_is_the_signature_error_not_the_checks_own(backend):
    """The size check is a function of the traced signature: a call leaving out a keyword failed inside it with
    Python's bare ``forward() missing 1 required keyword-only argument`` (serve25: under backend="auto"); it is
    the program's own error, naming the trace's keywords."""
    pytest.importorskip(backend)
    traced = tracejit.trace(keyword_view, example_kwarg_inputs={"x": torch.randn(4, 2), "bias": torch.randn(2)},
                            check_trace=False)
    program = tracejit.optimize_for_inference(traced, backend=backend)
    assert program.size_guards is not None
    x, bias = torch.randn(5, 2), torch.randn(2)
    torch.testing.assert_close(program(x=x, bias=bias), keyword_view(x, bias=bias))
    with pytest.raises(TypeError, match=r"called with keyword arguments \['x'\]; the trace had \['bias', 'x'\]"):
        program(x=x)
