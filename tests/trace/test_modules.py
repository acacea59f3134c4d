"""trace(module) / trace(module.method) / trace_module: the TracedModule mirrors the original
(hierarchy, the very same parameters and buffers, modes, dtype), keyword inputs, forward hooks,
and a small corpus of common layers compared with eager on new batch sizes and lengths.
"""
import copy

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import tracejit
from tracejit.ir import Graph


def assert_moves(out1, out2, margin=1e-2):
    """The outputs for two different inputs differ by far more than the comparison tolerance."""
    assert out1.shape != out2.shape or (out1 - out2).abs().max().item() > margin


def assert_same(actual, expected, tol=1e-5):
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol)


def flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for o in out for t in flat(o)]


# ---------------------------------------------------------------------------------------------
# modules used below
# ---------------------------------------------------------------------------------------------

class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 4))

    def forward(self, x):
        return self.lin(x) * self.scale


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.seq = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 4))
        self.unused = nn.Linear(2, 2)
        self.register_buffer("offset", torch.randn(4))

    def forward(self, x):
        return self.seq(self.inner(x)) + self.inner(x * 2) + self.offset

    def other(self, x):
        return self.inner(x).sigmoid() - self.offset


def test_trace_module_returns_traced_module_mirroring_hierarchy():
    torch.manual_seed(0)
    m = Outer()
    traced = tracejit.trace(m, torch.randn(3, 4))
    assert isinstance(traced, tracejit.TracedModule)
    assert isinstance(traced, nn.Module)
    assert [n for n, _ in traced.named_modules()] == [n for n, _ in m.named_modules()]
    for name, sub in traced.named_modules():
        assert isinstance(sub, tracejit.TracedModule), name
    # each called submodule has a graph and code of its own
    for name in ["inner", "inner.lin", "seq", "seq.0", "seq.1", "seq.2"]:
        sub = traced.get_submodule(name)
        assert isinstance(sub.graph, Graph), name
        assert "def forward" in sub.code, name
    assert "aten::linear" in str(traced.get_submodule("inner.lin").graph)
    assert "tracejit::call_module" in str(traced.graph)
    assert "aten::linear" in str(traced.inlined_graph)
    # a submodule that was never called has no traced forward
    with pytest.raises(AttributeError):
        traced.unused.graph
    x1, x2 = torch.randn(9, 4), torch.randn(9, 4)
    assert_moves(m(x1), m(x2))
    assert_same(traced(x1), m(x1))
    assert_same(traced(x2), m(x2))


def test_trace_bound_forward_is_same_as_trace_module():
    torch.manual_seed(0)
    m = Outer()
    traced = tracejit.trace(m.forward, torch.randn(3, 4))
    assert isinstance(traced, tracejit.TracedModule)
    assert [n for n, _ in traced.named_modules()] == [n for n, _ in m.named_modules()]
    x = torch.randn(6, 4)
    assert_moves(m(x), m(x + 1))
    assert_same(traced(x), m(x))
    assert_same(traced.forward(x + 1), m(x + 1))


def test_parameters_and_buffers_are_the_same_objects():
    torch.manual_seed(0)
    m = Outer()
    traced = tracejit.trace(m, torch.randn(3, 4))
    orig_params = dict(m.named_parameters(remove_duplicate=False))
    traced_params = dict(traced.named_parameters(remove_duplicate=False))
    assert list(traced_params) == list(orig_params)
    for name, p in orig_params.items():
        assert traced_params[name] is p, name
    orig_bufs = dict(m.named_buffers())
    traced_bufs = dict(traced.named_buffers())
    assert list(traced_bufs) == list(orig_bufs)
    for name, b in orig_bufs.items():
        assert traced_bufs[name] is b, name
    assert list(traced.state_dict()) == list(m.state_dict())
    for k, v in m.state_dict().items():
        assert torch.equal(traced.state_dict()[k], v)


def test_inplace_weight_update_of_original_is_seen_by_traced():
    torch.manual_seed(0)
    m = Outer()
    traced = tracejit.trace(m, torch.randn(3, 4))
    x = torch.randn(7, 4)
    before = traced(x).detach().clone()
    with torch.no_grad():
        m.inner.lin.weight.mul_(2)
        m.offset.add_(3)
    after_eager = m(x)
    assert_moves(before, after_eager)
    assert_same(traced(x), after_eager)


def test_state_dict_load_into_original_is_seen_by_traced():
    torch.manual_seed(0)
    m = Outer()
    traced = tracejit.trace(m, torch.randn(3, 4))
    other = Outer()
    x = torch.randn(5, 4)
    assert_moves(m(x), other(x))
    traced.load_state_dict(other.state_dict())
    assert_same(m(x), other(x))
    assert_same(traced(x), other(x))


def test_to_float64():
    torch.manual_seed(0)
    m = Outer()
    ref = copy.deepcopy(m).to(torch.float64)
    traced = tracejit.trace(m, torch.randn(3, 4))
    assert traced.to(torch.float64) is traced
    for name, p in traced.named_parameters():
        assert p.dtype == torch.float64, name
    for name, b in traced.named_buffers():
        assert b.dtype == torch.float64, name
    x = torch.randn(8, 4, dtype=torch.float64)
    out = traced(x)
    assert out.dtype == torch.float64
    assert_moves(ref(x), ref(x * 3))
    torch.testing.assert_close(out, ref(x), rtol=1e-12, atol=1e-12)


class BNNet(nn.Module):
    """Mode-dependent: BatchNorm statistics (no dropout, so train mode stays deterministic)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 6)
        self.bn = nn.BatchNorm1d(6)

    def forward(self, x):
        return self.bn(self.lin(x)).relu()


def test_train_eval_set_flags_on_the_whole_hierarchy():
    torch.manual_seed(0)
    m = Outer().eval()
    traced = tracejit.trace(m, torch.randn(3, 4))
    assert traced.train() is traced
    assert all(sub.training for sub in traced.modules())
    assert traced.eval() is traced
    assert not any(sub.training for sub in traced.modules())
    x = torch.randn(5, 4)
    assert_moves(m(x), m(x - 1))
    assert_same(traced(x), m(x))


def test_train_eval_switch_follows_eager_mode():
    torch.manual_seed(0)
    m = BNNet()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-1, 1)
        m.bn.running_var.uniform_(0.5, 2)
    m.eval()
    ref = copy.deepcopy(m)
    traced = tracejit.trace(m, torch.randn(4, 5))
    x = torch.randn(9, 5) * 3 + 1
    assert_same(traced(x), ref(x))

    traced.train()
    ref.train()
    expected_train = ref(x)
    assert_moves(expected_train, ref.eval()(x))  # the two modes compute different things here
    ref.train()
    assert_same(traced(x), expected_train)
    # the batch statistics were updated exactly like eager's
    assert_same(m.bn.running_mean, ref.bn.running_mean)
    assert_same(m.bn.running_var, ref.bn.running_var)

    traced.eval()
    ref.eval()
    assert_same(traced(x), ref(x))


def test_mode_switch_after_to_float64():
    torch.manual_seed(0)
    m = BNNet()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-1, 1)
    m.eval()
    ref = copy.deepcopy(m).to(torch.float64)
    traced = tracejit.trace(m, torch.randn(4, 5))
    traced.to(torch.float64)
    traced.train()
    ref.train()
    x = torch.randn(9, 5, dtype=torch.float64) * 3 + 1
    expected = ref(x)
    assert_moves(expected, ref.eval()(x))
    ref.train()
    torch.testing.assert_close(traced(x), expected, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------------------------
# shared / aliased parameters
# ---------------------------------------------------------------------------------------------

class SharedWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.b.weight = self.a.weight   # one parameter under two names

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


class AliasParam(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))
        self.register_parameter("alias", self.weight)

    def forward(self, x):
        return x @ self.alias + (x @ self.weight).tanh()


@pytest.mark.parametrize("cls", [SharedWeight, AliasParam])
def test_parameter_registered_under_two_names(cls):
    torch.manual_seed(0)
    m = cls()
    traced = tracejit.trace(m, torch.randn(2, 4))
    assert list(traced.state_dict()) == list(m.state_dict())
    orig = dict(m.named_parameters(remove_duplicate=False))
    mine = dict(traced.named_parameters(remove_duplicate=False))
    assert list(mine) == list(orig)
    for name in orig:
        assert mine[name] is orig[name], name
    x = torch.randn(6, 4)
    assert_moves(m(x), m(-x))
    assert_same(traced(x), m(x))
    # an update through one name is seen through the other in both
    with torch.no_grad():
        next(iter(orig.values())).mul_(-1.5)
    assert_same(traced(x), m(x))


class SharedModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = self.a                 # the same submodule (and so its parameters) under two names

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def test_submodule_registered_under_two_names():
    torch.manual_seed(0)
    m = SharedModule()
    traced = tracejit.trace(m, torch.randn(2, 4))
    names = [n for n, _ in m.named_modules(remove_duplicate=False)]
    assert [n for n, _ in traced.named_modules(remove_duplicate=False)] == names
    assert traced.a is traced.b
    assert list(traced.state_dict()) == list(m.state_dict())
    assert traced.b.weight is m.a.weight
    x = torch.randn(7, 4)
    assert_moves(m(x), m(x * 2))
    assert_same(traced(x), m(x))
    with torch.no_grad():
        m.b.bias.add_(1)
    assert_same(traced(x), m(x))


class VarArgs(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x, *rest):
        h = self.lin(x)
        for r in rest:
            h = h * r.sigmoid()
        return h


def test_forward_with_varargs():
    torch.manual_seed(0)
    m = VarArgs()
    traced = tracejit.trace(m, (torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3)))
    x, r1, r2 = torch.randn(6, 3), torch.randn(6, 3), torch.randn(6, 3)
    assert_moves(m(x, r1, r2), m(x, r2, r1 * 3))
    assert_same(traced(x, r1, r2), m(x, r1, r2))


# ---------------------------------------------------------------------------------------------
# other methods, trace_module
# ---------------------------------------------------------------------------------------------

def test_trace_other_method_becomes_forward():
    torch.manual_seed(0)
    m = Outer()
    traced = tracejit.trace(m.other, torch.randn(3, 4))
    assert isinstance(traced, tracejit.TracedModule)
    x = torch.randn(10, 4)
    assert_moves(m.other(x), m(x))  # forward and other compute different things
    assert_same(traced(x), m.other(x))
    assert_same(traced.forward(x), m.other(x))
    assert traced.inner.lin.weight is m.inner.lin.weight


class Net(nn.Module):
    """The example of torch.jit.trace_module's documentation."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 3)

    def forward(self, x):
        return self.conv(x)

    def weighted_kernel_sum(self, weight):
        return weight * self.conv.weight


def test_trace_module_several_methods_share_parameters():
    torch.manual_seed(0)
    n = Net()
    traced = tracejit.trace_module(n, {"forward": torch.rand(1, 1, 3, 3),
                                       "weighted_kernel_sum": torch.rand(1, 1, 3, 3)})
    assert isinstance(traced, tracejit.TracedModule)
    assert traced.conv.weight is n.conv.weight and traced.conv.bias is n.conv.bias
    x = torch.randn(3, 1, 8, 6)
    w = torch.randn(1, 1, 3, 3)
    assert_moves(n(x), n(x * 2))
    assert_moves(n.weighted_kernel_sum(w), n.weighted_kernel_sum(w + 1))
    assert_same(traced(x), n(x))
    assert_same(traced.weighted_kernel_sum(w), n.weighted_kernel_sum(w))
    assert "aten::conv2d" in str(traced.conv.graph)
    assert "aten::mul" in str(traced.weighted_kernel_sum.graph)
    assert "def weighted_kernel_sum" in traced.weighted_kernel_sum.code
    # one set of parameters: an update is seen by both methods
    with torch.no_grad():
        n.conv.weight.mul_(-3)
    assert_same(traced(x), n(x))
    assert_same(traced.weighted_kernel_sum(w), n.weighted_kernel_sum(w))


class TwoCalls(nn.Module):
    class Scale(nn.Module):
        def forward(self, x, s=None):
            return x * 2 if s is None else x * s

    def __init__(self):
        super().__init__()
        self.sub = TwoCalls.Scale()

    def forward(self, x):
        return self.sub(x)

    def other(self, x):
        return self.sub(x, x.exp())


def test_submodule_called_differently_in_one_trace():
    torch.manual_seed(0)

    class Both(TwoCalls):
        def forward(self, x):
            return self.sub(x) + self.sub(x, x.exp())

    m = Both()
    traced = tracejit.trace(m, torch.randn(3))
    assert isinstance(traced.sub.forward_1.graph, Graph)
    x = torch.randn(7)
    assert_moves(m(x), m(x + 1))
    assert_same(traced(x), m(x))


def test_trace_module_methods_calling_a_submodule_differently():
    torch.manual_seed(0)
    m = TwoCalls()
    traced = tracejit.trace_module(m, {"forward": torch.randn(3), "other": torch.randn(3)})
    x = torch.randn(6)
    assert_moves(m(x), m.other(x))
    assert_same(traced(x), m(x))
    assert_same(traced.other(x), m.other(x))


# ---------------------------------------------------------------------------------------------
# keyword inputs for modules
# ---------------------------------------------------------------------------------------------

class KwModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x, bias=None):
        return self.lin(x) + bias

    def other(self, a, b):
        return a - self.lin(b).relu()


def test_trace_module_with_example_kwarg_inputs():
    torch.manual_seed(0)
    m = KwModule()
    traced = tracejit.trace(m, example_kwarg_inputs={"x": torch.randn(2, 3), "bias": torch.randn(3)})
    x, b = torch.randn(7, 3), torch.randn(3)
    assert_moves(m(x, bias=b), m(x, bias=b + 1))
    assert_same(traced(x=x, bias=b), m(x=x, bias=b))
    assert_same(traced(bias=b + 1, x=x), m(x=x, bias=b + 1))


def test_trace_module_example_inputs_is_kwarg():
    torch.manual_seed(0)
    m = KwModule()
    traced = tracejit.trace_module(
        m, {"forward": {"x": torch.randn(2, 3), "bias": torch.randn(3)},
            "other": {"a": torch.randn(2, 3), "b": torch.randn(2, 3)}},
        example_inputs_is_kwarg=True)
    x, bias = torch.randn(5, 3), torch.randn(3)
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    assert_moves(m(x, bias=bias), m(x * 2, bias=bias))
    assert_moves(m.other(a, b), m.other(a, b * 2))
    assert_same(traced(x=x, bias=bias), m(x, bias=bias))
    assert_same(traced.other(b=b, a=a), m.other(a, b))


def test_kwarg_input_named_input_for_builtin_layer():
    torch.manual_seed(0)
    lin = nn.Linear(3, 2)
    traced = tracejit.trace(lin, example_kwarg_inputs={"input": torch.randn(4, 3)})
    x = torch.randn(6, 3)
    assert_moves(lin(x), lin(x + 1))
    assert_same(traced(input=x), lin(input=x))


# ---------------------------------------------------------------------------------------------
# hooks
# ---------------------------------------------------------------------------------------------

class Hooked(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.act = nn.Tanh()

    def forward(self, x):
        return self.act(self.inner(x))


HOOKS = [
    lambda m: m.inner.lin.register_forward_hook(lambda mod, inp, out: out * 3 - inp[0]),
    lambda m: m.act.register_forward_pre_hook(lambda mod, inp: (inp[0] + 0.5,)),
    lambda m: m.inner.register_forward_hook(lambda mod, inp, out: out.flip(-1)),
]


def test_forward_hooks_on_submodules_are_traced():
    torch.manual_seed(0)
    m = Hooked()
    x = torch.randn(6, 4)
    no_hooks = m(x).detach().clone()
    handles = [register(m) for register in HOOKS]
    traced = tracejit.trace(m, torch.randn(2, 4))
    with_hooks = m(x).detach().clone()
    assert_moves(with_hooks, no_hooks)
    assert_same(traced(x), with_hooks)
    for h in handles:
        h.remove()
    assert_same(m(x), no_hooks)
    # the hooks were traced: the traced module still applies them
    assert_same(traced(x), with_hooks)
    # on another batch size too, against eager with the hooks back on
    for register in HOOKS:
        register(m)
    x2 = torch.randn(11, 4)
    assert_moves(m(x2), m(x2 + 1))
    assert_same(traced(x2), m(x2))


def test_traced_hooks_survive_a_mode_switch():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.Tanh()).eval()
    handle = m[1].register_forward_hook(lambda mod, inp, out: out * 10)
    ref = copy.deepcopy(m)          # keeps the hook
    traced = tracejit.trace(m, torch.randn(4, 5))
    handle.remove()
    x = torch.randn(7, 5)
    assert_same(traced(x), ref(x))
    traced.train()
    ref.train()
    expected = ref(x)
    assert_moves(expected, m.train()(x))   # the hook matters in train mode too
    assert_same(traced(x), expected)


class ScaleBy(nn.Module):
    def forward(self, x, scale=1.0):
        return x * scale


class KwHooked(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.scale = ScaleBy()

    def forward(self, x):
        return self.scale(self.lin(x), scale=2.0)


def test_forward_hooks_with_kwargs_are_traced():
    torch.manual_seed(0)
    m = KwHooked()
    x = torch.randn(5, 3)
    plain = m(x).detach().clone()
    handles = [
        m.scale.register_forward_pre_hook(lambda mod, args, kwargs: (args, {"scale": kwargs["scale"] * 5}),
                                          with_kwargs=True),
        m.scale.register_forward_hook(lambda mod, args, kwargs, out: out + args[0].flip(0), with_kwargs=True),
    ]
    traced = tracejit.trace(m, torch.randn(2, 3))
    hooked = m(x).detach().clone()
    assert_moves(hooked, plain)
    assert_same(traced(x), hooked)
    for h in handles:
        h.remove()
    assert_same(traced(x), hooked)


def test_forward_hooks_on_the_root_module_are_traced():
    torch.manual_seed(0)
    m = Hooked()
    m.register_forward_pre_hook(lambda mod, inp: (inp[0] * 2,))
    m.register_forward_hook(lambda mod, inp, out: out + 1)
    traced = tracejit.trace(m, torch.randn(2, 4))
    x = torch.randn(5, 4)
    assert_moves(m(x), m.forward(x))
    assert_same(traced(x), m(x))


@pytest.mark.parametrize("register", [
    lambda mod: mod.register_full_backward_hook(lambda m, gi, go: None),
    lambda mod: mod.register_full_backward_pre_hook(lambda m, go: None),
], ids=["full_backward_hook", "full_backward_pre_hook"])
def test_backward_hook_on_submodule_raises_trace_error(register):
    torch.manual_seed(0)
    m = Hooked()
    register(m.inner.lin)
    with pytest.raises(tracejit.TraceError, match=r"inner\.lin"):
        tracejit.trace(m, torch.randn(2, 4))


def test_backward_hook_error_names_the_hooked_submodule_only():
    torch.manual_seed(0)
    m = Hooked()
    m.act.register_full_backward_hook(lambda mod, gi, go: None)
    with pytest.raises(tracejit.TraceError) as info:
        tracejit.trace(m, torch.randn(2, 4))
    msg = str(info.value)
    assert "'act'" in msg and "backward hook" in msg
    assert "inner" not in msg


# ---------------------------------------------------------------------------------------------
# corpus: common layers on new batch sizes / lengths
# ---------------------------------------------------------------------------------------------

class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 4, 3, stride=2)

    def forward(self, x):
        h = F.relu(self.bn(self.conv(x)))
        h = self.conv2(h)
        return F.adaptive_avg_pool2d(h, 1).flatten(1)


def _randomize_bn(m):
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.5, 0.5)


def test_conv_batchnorm_eval_new_batch_and_spatial_sizes():
    torch.manual_seed(0)
    m = ConvBN()
    _randomize_bn(m)
    m.eval()
    traced = tracejit.trace(m, torch.randn(2, 3, 12, 12))
    for shape in [(5, 3, 16, 10), (1, 3, 7, 9)]:
        x = torch.randn(shape)
        assert_moves(m(x), m(x * 2))
        assert_same(traced(x), m(x))


def test_conv_batchnorm_train_updates_running_stats_like_eager():
    torch.manual_seed(0)
    m = ConvBN()
    _randomize_bn(m)
    m.train()
    ref = copy.deepcopy(m)
    traced = tracejit.trace(m, torch.randn(2, 3, 8, 8), check_trace=False)
    m.load_state_dict(ref.state_dict())  # undo the statistics update of the tracing run
    initial_mean = m.bn.running_mean.clone()
    x = torch.randn(6, 3, 10, 7) * 2 + 1
    out_ref = ref(x)
    out = traced(x)
    assert_same(out, out_ref)
    assert_moves(initial_mean, m.bn.running_mean)   # the step did update the statistics
    for name, b in ref.named_buffers():
        torch.testing.assert_close(m.get_buffer(name), b, rtol=1e-5, atol=1e-6, msg=name)
    # a second step on another batch size
    x2 = torch.randn(3, 3, 9, 9)
    assert_same(traced(x2), ref(x2))
    assert int(m.bn.num_batches_tracked) == int(ref.bn.num_batches_tracked) == 2


def test_mlp():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 2))
    traced = tracejit.trace(mlp, torch.randn(3, 6))
    x = torch.randn(17, 6)
    assert_moves(mlp(x), mlp(x.flip(0)))
    assert_same(traced(x), mlp(x))
    assert_same(traced(x[:1]), mlp(x[:1]))


class AttentionBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)
        self.ln = nn.LayerNorm(8)
        self.ff = nn.Linear(8, 8)

    def forward(self, x):
        a, w = self.mha(x, x, x)
        h = self.ln(x + a)
        return h + self.ff(h).relu(), w


_CORPUS = {}


def _traced_attention():
    if "attn" not in _CORPUS:
        torch.manual_seed(0)
        m = AttentionBlock().eval()
        _CORPUS["attn"] = (m, tracejit.trace(m, torch.randn(2, 5, 8)))
    return _CORPUS["attn"]


@settings(max_examples=10, deadline=None)
@given(batch=st.integers(1, 4), length=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_attention_block_new_batch_and_length(batch, length, seed):
    m, traced = _traced_attention()
    torch.manual_seed(seed)
    x = torch.randn(batch, length, 8)
    out, w = traced(x)
    ref_out, ref_w = m(x)
    assert_moves(ref_out, m(x * 2 + 1)[0])
    assert w.shape == (batch, length, length)
    assert_same(out, ref_out)
    assert_same(w, ref_w)


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, num_layers=2, batch_first=True)
        self.head = nn.Linear(6, 3)

    def forward(self, x, state):
        out, (h, c) = self.lstm(x, state)
        return self.head(out), (h, c)


def _traced_lstm():
    if "lstm" not in _CORPUS:
        torch.manual_seed(0)
        m = LSTMNet().eval()
        ex = (torch.randn(2, 5, 4), (torch.randn(2, 2, 6), torch.randn(2, 2, 6)))
        _CORPUS["lstm"] = (m, tracejit.trace(m, ex))
    return _CORPUS["lstm"]


@settings(max_examples=10, deadline=None)
@given(batch=st.integers(1, 4), length=st.integers(1, 12), seed=st.integers(0, 2**16))
def test_lstm_new_batch_and_length(batch, length, seed):
    m, traced = _traced_lstm()
    torch.manual_seed(seed)
    x = torch.randn(batch, length, 4)
    state = (torch.randn(2, batch, 6), torch.randn(2, batch, 6))
    ref = m(x, state)
    moved = m(x * 2 + 1, (state[0] + 1, state[1] - 1))
    assert_moves(torch.cat([t.flatten() for t in flat(ref)]), torch.cat([t.flatten() for t in flat(moved)]))
    out = traced(x, state)
    assert isinstance(out, tuple) and isinstance(out[1], tuple)
    assert out[0].shape == (batch, length, 3)
    for a, b in zip(flat(out), flat(ref)):
        assert_same(a, b)


def test_transformer_encoder_layer_eval():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
    traced = tracejit.trace(layer, torch.randn(2, 5, 8))
    for shape in [(3, 7, 8), (1, 2, 8)]:
        x = torch.randn(shape)
        assert_moves(layer(x), layer(x.flip(1)))
        assert_same(traced(x), layer(x))
    with torch.no_grad():  # eager may take the fused fast path here
        x = torch.randn(4, 6, 8)
        assert_same(traced(x), layer(x), tol=1e-4)


class Indexing(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(5, 5)

    def forward(self, x, idx):
        h = self.proj(x)                     # (B, L, 5)
        a = h[:, 1:-1:2, None, ..., 0]       # slices, None, ellipsis, select
        b = h[..., -1].sum(-1)               # negative select
        c = h[:, idx]                        # advanced indexing with a tensor
        d = h[h.mean(-1) > 0].sum()          # boolean mask
        return a.squeeze(2) * b[:, None] + c.sum(1)[:, :1] + d


def test_indexing_module_new_sizes():
    torch.manual_seed(0)
    m = Indexing()
    traced = tracejit.trace(m, (torch.randn(3, 6, 5), torch.tensor([0, 2])))
    for shape, idx in [((4, 8, 5), torch.tensor([1, 3, 7])), ((2, 5, 5), torch.tensor([4]))]:
        x = torch.randn(shape)
        assert_moves(m(x, idx), m(x * -1.5, idx))
        assert_same(traced(x, idx), m(x, idx))


def _upsample(x):
    return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)


def _resize_to(x, y):
    return F.interpolate(x, size=y.shape[-2:], mode="nearest") + y


def test_interpolate_scale_factor_new_sizes():
    torch.manual_seed(0)
    traced = tracejit.trace(_upsample, torch.randn(1, 2, 4, 4))
    x = torch.randn(3, 2, 5, 7)
    out = traced(x)
    assert out.shape == (3, 2, 10, 14)
    assert_moves(_upsample(x), _upsample(-x))
    assert_same(out, _upsample(x))


def test_interpolate_size_from_another_tensor():
    torch.manual_seed(0)
    traced = tracejit.trace(_resize_to, (torch.randn(1, 2, 4, 4), torch.randn(1, 2, 8, 6)))
    x, y = torch.randn(2, 2, 5, 7), torch.randn(2, 2, 9, 11)
    out = traced(x, y)
    assert out.shape == (2, 2, 9, 11)
    assert_moves(_resize_to(x, y), _resize_to(x * 2, y))
    assert_same(out, _resize_to(x, y))
