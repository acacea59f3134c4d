"""What users touch on traced objects and in tracejit's errors, checked side by side with torch.jit."""
import collections
import io
import warnings

import pytest
import torch
from torch import nn

import tracejit


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 6), nn.ReLU())
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(6, 2)
        self.register_buffer("scale", torch.tensor(1.5))

    def forward(self, x):
        return self.head(self.drop(self.body(x))) * self.scale


def _pair():
    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return net, torch.jit.trace(net, x), tracejit.trace(net, x)


def test_module_surface_matches_torch():
    net, ref, got = _pair()
    assert [n for n, _ in got.named_modules()] == [n for n, _ in ref.named_modules()]
    assert got.state_dict().keys() == ref.state_dict().keys()
    for k, v in ref.state_dict().items():
        assert torch.equal(got.state_dict()[k], v)
    assert got.original_name == ref.original_name == "Net"
    assert got.body.original_name == ref.body.original_name == "Sequential"
    x = torch.randn(5, 4)
    torch.testing.assert_close(got.forward(x), ref.forward(x))
    torch.testing.assert_close(got(x), net(x))


def test_to_and_modes_match_the_original():
    net, ref, got = _pair()
    x = torch.randn(5, 4, dtype=torch.float64)
    got64, ref64 = got.to(torch.float64), ref.to(torch.float64)
    assert got64.head.weight.dtype == torch.float64
    torch.testing.assert_close(got64(x), ref64(x))
    assert got.train() is got and got.training and got.head.training
    assert got.eval() is got and not got.training and not got.body.training


def test_graph_code_and_constants():
    _, _, got = _pair()
    assert "self._modules['head']" in got.code and got.graph is not None and got.inlined_graph is not None
    code, consts = got.code_with_constants
    assert code == got.code and isinstance(consts, dict)
    table = torch.arange(3.0)     # a free tensor: captured as a constant
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = tracejit.trace(lambda x: x + table, torch.zeros(3))
    code, consts = f.code_with_constants
    assert len(consts) == 1 and torch.equal(next(iter(consts.values())), torch.arange(3.0))
    assert f.original_name == "<lambda>"


def test_save_with_extra_files_torch_spelling(tmp_path):
    _, _, got = _pair()
    path = tmp_path / "net.tjit"
    got.save(str(path), _extra_files={"meta.json": '{"v": 1}'})
    extra = {"meta.json": ""}
    loaded = tracejit.load(str(path), _extra_files=extra)
    assert extra == {"meta.json": b'{"v": 1}'}
    x = torch.randn(2, 4)
    torch.testing.assert_close(loaded(x), got(x))
    buf = io.BytesIO()
    tracejit.save(got, buf, {"a.txt": b"A"})     # positional, as torch.jit.save(m, f, _extra_files)
    buf.seek(0)
    extra = {"a.txt": ""}
    tracejit.load(buf, None, extra)
    assert extra == {"a.txt": b"A"}


def test_function_save_method(tmp_path):
    f = tracejit.trace(lambda x: x + 2, torch.ones(2, 2))
    f.save(str(tmp_path / "f.tjit"))
    x = torch.randn(3, 3)
    torch.testing.assert_close(tracejit.load(str(tmp_path / "f.tjit"))(x), x + 2)


def test_load_of_a_bad_file_is_a_runtime_error_as_in_torch(tmp_path):
    bad = tmp_path / "bad.tjit"
    bad.write_bytes(b"definitely not a program")
    with pytest.raises(RuntimeError):
        torch.jit.load(str(bad))
    with pytest.raises(RuntimeError) as info:
        tracejit.load(str(bad))
    assert isinstance(info.value, tracejit.LoadError)


def test_load_of_a_missing_path_is_a_value_error_as_in_torch(tmp_path):
    missing = str(tmp_path / "nope.tjit")
    with pytest.raises(ValueError, match="does not exist"):
        torch.jit.load(missing)
    with pytest.raises(ValueError, match="does not exist") as info:
        tracejit.load(missing)
    assert isinstance(info.value, tracejit.LoadError)


def test_error_classes_are_torch_s():
    assert issubclass(tracejit.TracerWarning, torch.jit.TracerWarning)
    assert issubclass(tracejit.TracingCheckError, torch.jit.TracingCheckError)
    assert issubclass(tracejit.TracingCheckError, RuntimeError)
    assert issubclass(tracejit.BackwardHookError, ValueError)
    assert issubclass(tracejit.BackwardHookError, tracejit.TraceError)
    assert issubclass(tracejit.LoadError, RuntimeError)


def test_messages_keep_torch_key_phrases():
    class Hooked(nn.Module):
        def forward(self, x):
            return x * 2
    m = Hooked()
    m.register_full_backward_hook(lambda *a: None)
    for trace in (torch.jit.trace, tracejit.trace):
        with pytest.raises(ValueError, match="Modules that have backward hooks assigned can't be compiled"):
            trace(m, torch.ones(2))
        with pytest.raises(RuntimeError, match="Encountering a dict at the output"):
            trace(lambda x: {"y": x}, torch.ones(2))

    def loop(x):
        for _ in range(x.size(0)):
            x = torch.neg(x)
        return x
    for trace in (torch.jit.trace, tracejit.trace):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(torch.jit.TracingCheckError, match="Graphs differed across invocations!"):
                trace(loop, torch.randn(3, 4), check_inputs=[torch.randn(4, 4)])


def test_warning_filters_written_for_torch_match_tracejit():
    def f(x):
        return x * int(x.sum() * 0 + 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message="Converting a tensor to a Python integer",
                                category=torch.jit.TracerWarning)
        tracejit.trace(f, torch.ones(3))
    assert not [w for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracejit.trace(f, torch.ones(3))
    texts = [str(w.message) for w in caught if issubclass(w.category, tracejit.TracerWarning)]
    assert len(texts) == 1 and "a Python integer" in texts[0] and "int(tensor)" in texts[0]


def test_check_trace_false_runs_no_checker():
    def f(x):
        return torch.dropout(x, 0.5, True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracejit.trace(f, torch.ones(3), check_trace=False)
    assert not [w for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracejit.trace(f, torch.ones(3))
    assert any("Trace had nondeterministic nodes" in str(w.message) for w in caught)


def test_ignore_lib_warnings_filters_torch_internal_sites():
    with warnings.catch_warnings():
        warnings.resetwarnings()
        tracejit.TracerWarning.ignore_lib_warnings()
        assert any(f[2] is tracejit.TracerWarning and f[3] is not None and f[3].pattern == "torch.(?!jit)"
                   for f in warnings.filters)


def test_is_tracing_true_only_while_tracing():
    seen = []
    tracejit.trace(lambda x: seen.append(torch.jit.is_tracing()) or x * 2, torch.ones(2), check_trace=False,
                   allow_frozen_python_state=True)   # `seen`: a spy (state the program does not replay)
    assert seen == [True] and torch.jit.is_tracing() is False


def test_keyword_traced_program_binds_positionally_in_signature_order():
    class M(nn.Module):
        def forward(self, x, scale=2.0, bias=None):
            y = x * scale
            return y if bias is None else y + bias
    m = M()
    x, b = torch.randn(3), torch.randn(3)
    got = tracejit.trace(m, example_kwarg_inputs={"bias": b, "x": x})
    ref = torch.jit.trace(m, example_kwarg_inputs={"bias": b, "x": x})
    x2, b2 = torch.randn(5), torch.randn(5)
    torch.testing.assert_close(got(x2, b2), ref(x2, b2))
    torch.testing.assert_close(got(x=x2, bias=b2), m(x2, bias=b2))
    got.register_forward_hook(lambda mod, inputs, out: out * 2)     # calls now go through nn.Module.__call__
    torch.testing.assert_close(got(x2, b2), 2 * (x2 * 2.0 + b2))
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        got(x2, x=x2)
    with pytest.raises(TypeError, match="takes at most 2 arguments"):
        got(x2, b2, b2)


class _TensorKeyed(nn.Module):
    """torch.jit.trace(strict=False) traces a dict keyed by tensors (upstream test_trace_dict_output)."""

    def forward(self, a, b):
        return {a: b, b: a, a * 2: b + 1}


def _same_keyed(got, want, inputs):
    """Same values in the same order; keys that are inputs are the caller's objects, computed keys equal."""
    assert type(got) is type(want) and len(got) == len(want)
    for (gk, gv), (wk, wv) in zip(got.items(), want.items()):
        if any(wk is t for t in inputs):
            assert gk is wk
        torch.testing.assert_close(gk, wk)
        torch.testing.assert_close(gv, wv)


def test_tensor_keyed_dict_output_follows_eager_on_new_inputs_like_torch_jit(tmp_path):
    example = (torch.rand(3), torch.rand(3))
    new = (torch.rand(5), torch.rand(5))
    with pytest.raises(RuntimeError, match="Encountering a dict at the output"):
        tracejit.trace(_TensorKeyed(), example)
    traced = tracejit.trace(_TensorKeyed(), example, strict=False)
    reference = torch.jit.trace(_TensorKeyed(), example, strict=False)
    want = _TensorKeyed()(*new)
    _same_keyed(traced(*new), want, new)
    _same_keyed(reference(*new), want, new)           # torch.jit's answer: the same
    traced.save(tmp_path / "keyed.pt")
    _same_keyed(tracejit.load(tmp_path / "keyed.pt")(*new), want, new)
    _same_keyed(tracejit.optimize_for_inference(tracejit.trace(_TensorKeyed().eval(), example, strict=False))(*new),
                want, new)


def test_tensor_keyed_ordered_dict_and_a_submodule_returning_one():
    class Inner(nn.Module):
        def forward(self, a, b):
            return {a: b * 2, b.sum(): a}

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, a, b):
            d = self.inner(a, b)   # traced through: its result cannot be a call's flat outputs
            return collections.OrderedDict((k + 1, v) for k, v in d.items()), sum(k.sum() * v.sum() for k, v in d.items())

    example, new = (torch.rand(3), torch.rand(3)), (torch.rand(4), torch.rand(4))
    traced = tracejit.trace(Outer(), example, strict=False)
    got, want = traced(*new), Outer()(*new)
    assert type(got[0]) is collections.OrderedDict
    _same_keyed(got[0], want[0], new)
    torch.testing.assert_close(got[1], want[1])


def test_tensor_keyed_dict_as_an_input_is_a_clear_error():
    with pytest.raises(tracejit.TraceError, match="input of the traced function is a dict keyed by tensors"):
        tracejit.trace(lambda d: d[next(iter(d))] * 2, ({torch.ones(2): torch.ones(2)},))


def test_trace_module_keyword_examples_take_positional_calls():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(x)

        def score(self, x, y, temperature=1.0):
            return (self.lin(x) * y).sum(-1) / temperature

    net = Net()
    ex = {"forward": {"x": torch.randn(2, 3)}, "score": {"y": torch.randn(2, 3), "x": torch.randn(2, 3)}}
    ref = torch.jit.trace_module(net, ex, example_inputs_is_kwarg=True)
    got = tracejit.trace_module(net, ex, example_inputs_is_kwarg=True)
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    torch.testing.assert_close(got.score(x, y), ref.score(x, y))
    torch.testing.assert_close(got.score(y=y, x=x), net.score(x, y))
    torch.testing.assert_close(got(x), net(x))
    buf = io.BytesIO()
    got.save(buf)
    buf.seek(0)
    loaded = tracejit.load(buf)
    torch.testing.assert_close(loaded.score(x, y), net.score(x, y))
