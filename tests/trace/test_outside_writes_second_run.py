"""A recording run forward again (trace/attempts.py: an escaped tensor traced through, or a first call that only
set the module up) must not apply twice an in-place write a caller sees. Session 28 compared the version counters
of inputs, parameters, buffers and direct tensor attributes only: a write to a module-level tensor, a closure's
tensor or a tensor inside a container attribute (``self.stats = [torch.zeros(3)]``) was applied once per run, so
after ``tracejit.trace`` the tensor had counted two calls where one eager call (and torch.jit.trace with
check_trace=False) counts one, silently. Now every in-place write (an op, ``out=``, or ``t[i] = v``) to a tensor the
run did not make is listed (trace/captured_writes.py) and the second run is refused, naming the line."""
from __future__ import annotations

import types

import pytest
import torch
from torch import nn

import tracejit
from escape_models import HandsOut, Inner

COUNTS = torch.zeros(3)   # a module-level tensor forward writes into


def _escaping(write):
    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()
            self.held = [torch.zeros(3)]                        # a tensor inside a container attribute
            self.ns = types.SimpleNamespace(t=torch.zeros(3))   # a tensor of a held plain object
            target = torch.zeros(3)
            self.closure_target = lambda: target   # reached only through a closure

        def forward(self, x):
            write(self)
            store = []
            return self.inner(x, store) + store[0]
    return Outer


def _global_add(m):
    COUNTS.add_(1)


def _global_setitem(m):
    COUNTS[0] = COUNTS[0] + 1


def _global_out(m):
    torch.add(COUNTS, 1, out=COUNTS)


def _list_item(m):
    m.held[0].add_(1)


def _namespace(m):
    m.ns.t[1] = 5.0


def _closure(m):
    m.closure_target().mul_(2).add_(1)


WRITES = {"global add_": (_global_add, lambda m: COUNTS), "global t[i] = v": (_global_setitem, lambda m: COUNTS),
          "global out=": (_global_out, lambda m: COUNTS), "list attribute item": (_list_item, lambda m: m.held[0]),
          "held object's tensor": (_namespace, lambda m: m.ns.t),
          "closure's tensor": (_closure, lambda m: m.closure_target())}


@pytest.mark.parametrize("case", sorted(WRITES))
def test_a_write_outside_the_module_before_an_escape_is_refused_and_applied_once(case):
    write, target = WRITES[case]
    Outer = _escaping(write)
    COUNTS.zero_()
    traced_model, eager_model = Outer().eval(), Outer().eval()
    with torch.no_grad(), pytest.raises(tracejit.TraceError) as info:
        tracejit.trace(traced_model, torch.randn(2, 4), check_trace=False)
    after_trace = target(traced_model).clone()
    message = str(info.value)
    assert "computed inside submodule 'inner'" in message
    assert "held outside the module's parameters and buffers" in message and "was written in place" in message
    assert "test_outside_writes_second_run.py:" in message.split("parameters and buffers (at")[1]   # the writing line
    COUNTS.zero_()
    with torch.no_grad():
        eager_model(torch.randn(2, 4))   # one eager call
    torch.testing.assert_close(after_trace, target(eager_model))   # one run, not two


class SetsUpAndCounts(nn.Module):
    """A first call that sets the module up (an attribute it did not have) is followed by a second run."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        COUNTS.add_(1)
        if not hasattr(self, "ready"):
            self.ready = True
        return self.lin(x)


def test_a_write_outside_the_module_in_a_set_up_run_is_refused_and_applied_once():
    COUNTS.zero_()
    with torch.no_grad(), pytest.raises(tracejit.TraceError, match="held outside the module's parameters"):
        tracejit.trace(SetsUpAndCounts(), torch.randn(2, 4), check_trace=False)
    assert COUNTS.tolist() == [1.0, 1.0, 1.0]   # as one eager call


class NoWrites(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        scratch = torch.zeros(3)
        scratch[0] = 1.0        # a tensor the run made: no caller sees it
        scratch.add_(x.sum())
        store = []
        return self.inner(x, store) + store[0] + scratch.sum()


def test_writes_into_tensors_the_run_made_still_run_forward_again():
    model = NoWrites().eval()
    with torch.no_grad():
        traced = tracejit.trace(model, torch.randn(2, 4))
        x = torch.randn(5, 4)
        torch.testing.assert_close(traced(x), model(x))


def test_an_escape_under_inference_mode_says_why_it_is_refused():
    """Inference tensors keep no version counter: a second run is refused (default-deny), and the message says
    that, not that an input was written (before hunt29: "an input was written in place", which it was not)."""
    with torch.inference_mode(), pytest.raises(tracejit.TraceError, match="inference tensor, which keeps no version"):
        tracejit.trace(HandsOut(Inner()).eval(), torch.randn(2, 4))
    with torch.no_grad():   # the advice works
        model = HandsOut(Inner()).eval()
        traced = tracejit.trace(model, torch.randn(2, 4))
        x = torch.randn(5, 4)
        torch.testing.assert_close(traced(x), model(x))


def _state_write(write):
    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()
            self.register_buffer("count", torch.zeros(()))

        def forward(self, x):
            write(self)
            store = []
            return self.inner(x, store) + store[0]
    return Outer


STATE_WRITES = {
    "buffer .data.add_": lambda m: m.count.data.add_(1),
    "parameter .data.mul_ (an EMA update)": lambda m: m.inner.lin.weight.data.mul_(0.5),
    "buffer written through its numpy view": lambda m: m.count.numpy().__iadd__(1),
}


@pytest.mark.parametrize("case", sorted(STATE_WRITES))
def test_a_write_to_module_state_its_version_counter_misses_is_refused_and_applied_once(case):
    """``.data`` has a version counter of its own, and numpy writes bypass torch: before hunt29 the second run
    applied such a write again (an EMA step taken twice by one trace), silently."""
    Outer = _state_write(STATE_WRITES[case])
    model, eager = Outer().eval(), Outer().eval()
    eager.load_state_dict(model.state_dict())
    with torch.no_grad(), pytest.raises(tracejit.TraceError, match="changed state a caller sees"):
        tracejit.trace(model, torch.randn(2, 4), check_trace=False)
    with torch.no_grad():
        eager(torch.randn(2, 4))   # one eager call
    for (name, after_trace), once in zip(model.state_dict().items(), eager.state_dict().values()):
        torch.testing.assert_close(after_trace, once, msg=f"{name} was written twice")


class SizesInner(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.kind = kind

    def forward(self, x, store):
        n = x.shape[0]
        if self.kind == "tensor":
            store.append(torch.tensor(n * 2.0))                      # a number from a size
        elif self.kind == "mask":
            store.append(torch.triu(torch.ones(n, n), 1))           # a causal mask of the input's length
        else:
            store.append(torch.arange(n).float()[:, None])          # positions
        return self.lin(x)


class SizesOuter(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.inner = SizesInner(kind)

    def forward(self, x):
        store = []
        y = self.inner(x, store)
        return y + store[0].sum() if store[0].dim() == 2 and store[0].shape[1] != 1 else y + store[0]


@pytest.mark.parametrize("kind", ["tensor", "mask", "arange"])
def test_a_tensor_made_from_sizes_inside_a_submodule_and_handed_out_follows_new_sizes(kind):
    """Before hunt29 a handed-out tensor made from sizes and constants alone was frozen as the example's tensor
    with no guard (the size was read inside the submodule's frame, so the caller had none): ``torch.tensor(n * 2.0)``
    and a causal mask answered the example's at a new length, silently; positions crashed in broadcasting. Now it
    is traced through as one that reads data."""
    model = SizesOuter(kind).eval()
    with torch.no_grad():
        traced = tracejit.trace(model, torch.randn(2, 4))
        for x in (torch.randn(5, 4), torch.randn(2, 4)):
            torch.testing.assert_close(traced(x), model(x))
