"""TorchScript inside the traced code and objects tracejit cannot flatten (issue 10, item 6): traced through
the Python original, or refused with a clear error; never frozen."""
import dataclasses
import warnings

import pytest
import torch
import torch.utils._pytree as torch_pytree

import tracejit
from capture_testlib import assert_same, check_pattern, quiet_trace, round_trip


@torch.jit.script
def tile3(x):
    return torch.cat([x, x, x], 0)


@torch.jit._script_if_tracing
def scaled_rows(x):
    out = x.clone()
    for i in range(x.size(0)):
        out[i] = out[i] * (i + 1)
    return out


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x)) + x.size(0)


class WithScriptedChild(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = torch.jit.script(Block())
        self.out = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.out(self.block(x))


def uses_script_function(x):                     # the row: (2,4) frozen where eager gives (6,4)
    return tile3(x) * 2


def uses_script_if_tracing(x):
    return scaled_rows(x) + 1


def test_script_function_is_traced_through_its_python_original():
    traced = check_pattern(uses_script_function, (torch.randn(2, 4),),
                           [(torch.randn(5, 4),), (torch.randn(1, 4, dtype=torch.float64),)], "rr")
    assert traced(torch.randn(5, 4)).shape == (15, 4)
    assert "torch.cat" in traced.code or "cat(" in traced.code


def test_script_if_tracing_helper_is_traced_through_its_python_original():
    check_pattern(uses_script_if_tracing, (torch.randn(3, 4),), [(torch.randn(3, 4),), (torch.randn(3, 2),)], "rr")


def test_scripted_submodule_is_traced_through_its_python_class():
    model = WithScriptedChild()
    traced = quiet_trace(model, (torch.randn(2, 4),))
    for n in (2, 6):
        x = torch.randn(n, 4)
        assert_same(traced(x), model(x), f"batch {n}")
    x = torch.randn(3, 4, requires_grad=True)
    traced(x).sum().backward()
    g_traced = x.grad.clone()
    x.grad = None
    model(x).sum().backward()
    torch.testing.assert_close(g_traced, x.grad)
    loaded = round_trip(traced)
    x = torch.randn(7, 4)
    assert_same(loaded(x), model(x), "loaded")


def test_script_function_without_python_original_is_refused_with_its_line():
    cu = torch.jit.CompilationUnit("def hidden(x):\n    return x * 3\n")

    def fn(x):
        return cu.hidden(x) + 1  # @hidden_line
    with pytest.raises(tracejit.TraceError, match=r"TorchScript function .*Python original") as err:
        tracejit.trace(fn, (torch.randn(2),))
    assert ".py:" in str(err.value)


class Cache:                                     # a cache object holding tensors, not registered with pytree
    def __init__(self):
        self.keys = []

    def update(self, k):
        self.keys.append(k)
        return torch.cat(self.keys, 0)


def returns_cache(x):
    cache = Cache()
    cache.update(x * 2)
    return x + 1, cache


def takes_cache(x, cache):
    return cache.update(x).sum(0)


def test_output_object_holding_tensors_is_refused_not_frozen():
    with pytest.raises(tracejit.TraceError, match=r"Cache object .*cannot flatten"):
        tracejit.trace(returns_cache, (torch.randn(2, 3),), check_trace=False)


class SlotBox:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def test_output_object_with_slots_holding_tensors_is_refused():
    with pytest.raises(tracejit.TraceError, match="SlotBox"):
        tracejit.trace(lambda x: (x + 1, SlotBox(x * 2)), (torch.randn(2),), check_trace=False)


def test_output_object_without_tensors_stays_a_constant():
    traced = quiet_trace(lambda x: (x + 1, "label"), (torch.randn(2),))
    out = traced(torch.ones(3))
    assert out[1] == "label" and torch.equal(out[0], torch.full((3,), 2.0))


def test_input_object_holding_tensors_is_refused_not_frozen():
    cache = Cache()
    cache.update(torch.randn(1, 3))
    with pytest.raises(tracejit.TraceError, match=r"input of the traced function holds a Cache"):
        tracejit.trace(takes_cache, (torch.randn(2, 3), cache), check_trace=False)


@dataclasses.dataclass
class Pair:
    first: torch.Tensor
    second: torch.Tensor


torch_pytree.register_pytree_node(
    Pair, lambda p: ([p.first, p.second], None), lambda leaves, ctx: Pair(*leaves),
    serialized_type_name=f"{__name__}.Pair")


def swap(p):
    return Pair(p.second * 2, p.first + 1)


def test_registered_pytree_class_is_flattened_in_and_out():
    traced = quiet_trace(swap, (Pair(torch.randn(2), torch.randn(3)),))
    p = Pair(torch.randn(5), torch.randn(4))
    out = traced(p)
    assert isinstance(out, Pair)
    assert_same((out.first, out.second), (swap(p).first, swap(p).second))
    with pytest.raises(TypeError, match="should be a Pair"):
        traced((p.first, p.second))


class Tagged:
    """Registered with a flatten context that is not plain data (an object): a file cannot hold it."""

    def __init__(self, value, tag):
        self.value, self.tag = value, tag


torch_pytree.register_pytree_node(
    Tagged, lambda t: ([t.value], t.tag), lambda leaves, tag: Tagged(leaves[0], tag),
    serialized_type_name=f"{__name__}.Tagged")


def test_registered_pytree_class_round_trips_and_an_unsaveable_context_says_why():
    """A registered class comes back as itself where this process registered it (issue #22 item 3,
    serialize/structure.py); one whose flatten context is not plain data cannot be saved."""
    traced = quiet_trace(swap, (Pair(torch.randn(2), torch.randn(3)),))
    loaded = round_trip(traced)
    p = Pair(torch.randn(5), torch.randn(4))
    out = loaded(p)
    assert isinstance(out, Pair)
    assert_same((out.first, out.second), (swap(p).first, swap(p).second))
    tagged = quiet_trace(lambda x: Tagged(x * 2, object()), (torch.randn(3),))
    with pytest.raises(tracejit.SaveError, match="registered with torch.utils._pytree whose flatten context is not"):
        round_trip(tagged)


def test_torch_jit_traced_function_inside_is_traced_through_its_python_original():
    def double_rows(x):
        return torch.cat([x, x], 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jitted = torch.jit.trace(double_rows, (torch.randn(2, 3),))

    def fn(x):
        return jitted(x) + 1
    check_pattern(fn, (torch.randn(2, 3),), [(torch.randn(4, 3),), (torch.randn(1, 3, dtype=torch.float64),)])


class Outer(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x) * 2  # @jit_child_line


def test_torch_jit_traced_submodule_is_refused_with_its_line():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inner = torch.jit.trace(Block(), (torch.randn(2, 4),))
    with pytest.raises(tracejit.TraceError, match=r"scripted module .*Python class is not available") as err:
        tracejit.trace(Outer(inner), (torch.randn(2, 4),))
    line = int(str(err.value).split(".py:")[1].split()[0])
    assert open(__file__).read().splitlines()[line - 1].rstrip().endswith("# @jit_child_line")


def test_scripted_root_module_is_traced_through_its_python_class():
    model = torch.jit.script(Block())
    traced = quiet_trace(model, (torch.randn(2, 4),))
    for n in (1, 5):
        x = torch.randn(n, 4)
        assert_same(traced(x), model(x), f"batch {n}")
