"""Two threads tracing at once, traced programs called from many threads, and the checker's
random stream and warnings kept to the tracing thread."""
from __future__ import annotations

import threading
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.runtime.private_rng import PrivateRandomness
from threadlib import Meeting, assert_nothing_patched, run_threads


class Conv(nn.Module):
    """Image-like model: a submodule, a size used in a view, a loop over range()."""

    def __init__(self, meet=None):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 2)
        self.meet = meet

    def forward(self, x):
        if self.meet is not None and tracejit.is_tracing():
            assert self.meet("conv")
        y = torch.relu(self.conv(x)).mean(dim=(2, 3))
        for _ in range(2):
            y = y * 0.5 + 1
        return self.head(y.view(x.size(0), -1))


class Seq(nn.Module):
    """Sequence model: embedding, GRU, a size arithmetic on the time axis."""

    def __init__(self, meet=None):
        super().__init__()
        self.emb = nn.Embedding(10, 5)
        self.gru = nn.GRU(5, 6, batch_first=True)
        self.meet = meet

    def forward(self, tokens):
        if self.meet is not None and tracejit.is_tracing():
            assert self.meet("seq")
        out, h = self.gru(self.emb(tokens))
        return out[:, -1] + h[0], out.reshape(tokens.size(0) * tokens.size(1), -1).sum(0)


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _same(a, b):
    if isinstance(a, tuple):
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(x, y)
    else:
        torch.testing.assert_close(a, b)


def test_two_threads_trace_different_models_at_the_same_time():
    meeting = Meeting(["conv", "seq"])
    conv, seq = Conv(meeting.arrive).eval(), Seq(meeting.arrive).eval()
    x, tokens = torch.randn(2, 3, 8, 8), torch.randint(0, 10, (2, 4))
    traced = {}
    run_threads(lambda: traced.__setitem__("conv", tracejit.trace(conv, (x,))),
                lambda: traced.__setitem__("seq", tracejit.trace(seq, (tokens,))))
    assert_nothing_patched()
    conv.meet = seq.meet = None
    references = {"conv": torch.jit.trace(conv, (x,)), "seq": torch.jit.trace(seq, (tokens,))}
    with torch.no_grad():
        cases = (("conv", conv, torch.randn(5, 3, 6, 7)), ("conv", conv, torch.randn(1, 3, 8, 8)),
                 ("seq", seq, torch.randint(0, 10, (3, 7))), ("seq", seq, torch.randint(0, 10, (1, 2))))
        for name, model, new in cases:
            eager = model(new)
            assert not torch.equal(_first(eager), _first(model(torch.zeros_like(new))))   # the input moves it
            _same(traced[name](new), eager)
            _same(traced[name](new), references[name](new))
    # each ledger holds its own trace's events only: the same as a trace made alone (but for the guard on
    # `self.meet`, a plain None only in the trace made alone: the threads traced with a function there)
    for name, model, example in (("conv", conv, x), ("seq", seq, tokens)):
        alone = tracejit.trace(model, (example,))
        kept = [(e.kind, e.message) for e in alone.ledger if not (e.kind == "global" and "self.meet" in e.message)]
        assert [(e.kind, e.message) for e in traced[name].ledger] == kept


def test_a_failing_trace_does_not_disturb_a_concurrent_one():
    meeting = Meeting(["conv", "fails"])

    def fails(x):
        meeting.arrive("fails")
        for _ in range(x.size(0)):
            x = x + 1
        raise KeyError("raised while the other thread is still tracing")

    conv = Conv(meeting.arrive).eval()
    x = torch.randn(2, 3, 8, 8)
    traced, errors = [], []

    def failing():
        try:
            tracejit.trace(fails, (torch.ones(3),))
        except KeyError as e:
            errors.append(e)

    run_threads(lambda: traced.append(tracejit.trace(conv, (x,))), failing)
    assert len(errors) == 1 and len(traced) == 1
    assert_nothing_patched()
    conv.meet = None
    new = torch.randn(3, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(traced[0](new), conv(new))


def test_traced_and_loaded_programs_called_from_many_threads(tmp_path):
    torch.manual_seed(3)
    conv, seq = Conv().eval(), Seq().eval()
    t_conv = tracejit.trace(conv, (torch.randn(2, 3, 8, 8),))
    t_seq = tracejit.trace(seq, (torch.randint(0, 10, (2, 4)),))
    tracejit.save(t_seq, tmp_path / "seq.tj")
    loaded = tracejit.load(tmp_path / "seq.tj")
    inputs = [(torch.randn(1 + i % 3, 3, 8, 8), torch.randint(0, 10, (1 + i % 2, 2 + i % 4))) for i in range(8)]
    with torch.no_grad():
        expected = [(conv(a), seq(b)) for a, b in inputs]
    bad = []

    def worker(k):
        def run():
            for rep in range(15):
                i = (k + rep) % len(inputs)
                a, b = inputs[i]
                with torch.no_grad():
                    got = (t_conv(a), t_seq(b), loaded(b))
                if not (torch.allclose(got[0], expected[i][0]) and
                        all(torch.allclose(g, e) for g, e in zip(got[1], expected[i][1])) and
                        all(torch.allclose(g, e) for g, e in zip(got[2], expected[i][1]))):
                    bad.append((k, rep))
        return run

    run_threads(*[worker(k) for k in range(6)])
    assert bad == []


class Noisy(nn.Module):
    """Random ops of every kind the checker's private stream has to cover."""

    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.3)
        self.drop2d = nn.Dropout2d(0.5)
        self.alpha = nn.AlphaDropout(0.2)

    def forward(self, x):
        y = self.drop(x) + torch.rand_like(x) + torch.randn(x.shape) * 0.1
        y = self.drop2d(y.view(x.size(0), 2, -1, 1)).view(x.shape)
        return self.alpha(y) + torch.empty_like(x).uniform_() + torch.bernoulli(torch.full_like(x, 0.5))


def test_checker_does_not_move_or_rewind_the_global_generator():
    """The checker's runs draw from a private stream: the global generator ends where one eager run leaves it."""
    model = Noisy().train()
    x, check = torch.randn(4, 6), torch.randn(2, 6)
    torch.manual_seed(11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tracejit.trace(model, (x,), check_trace=False)
    after_record_only = torch.get_rng_state()
    torch.manual_seed(11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tracejit.trace(model, (x,), check_inputs=[(check,)])
    assert torch.equal(torch.get_rng_state(), after_record_only)
    torch.manual_seed(11)
    model(x)   # one eager run draws exactly what the recording drew
    assert torch.equal(torch.get_rng_state(), after_record_only)


@pytest.mark.parametrize("op", ["rand", "dropout", "feature_dropout", "alpha_dropout", "native_dropout", "normal_",
                                "functional_dropout_inplace"])
def test_private_randomness_rewinds_without_touching_the_global_generator(op):
    x = torch.randn(4, 3, 5) + 3
    draw = {
        "rand": lambda: torch.rand(4, 3),
        "dropout": lambda: torch.dropout(x, 0.4, True),
        "feature_dropout": lambda: nn.functional.dropout2d(x.unsqueeze(-1), 0.5, True),
        "alpha_dropout": lambda: nn.functional.alpha_dropout(x, 0.3, True),
        "native_dropout": lambda: torch.native_dropout(x, 0.4, True)[0],
        "normal_": lambda: torch.empty(5).normal_(),
        "functional_dropout_inplace": lambda: nn.functional.dropout(x.clone(), 0.4, True, inplace=True),
    }[op]
    torch.manual_seed(5)
    global_first = draw()
    torch.manual_seed(5)
    before = torch.get_rng_state()
    with PrivateRandomness() as rng:
        first = draw()
        rng.rewind()
        again = draw()
        other = draw()
    assert torch.equal(torch.get_rng_state(), before)   # read, never advanced or set
    assert torch.equal(first, again)
    assert not torch.equal(first, other)                # the private stream does advance
    assert first.shape == global_first.shape and first.dtype == global_first.dtype
    if op in ("dropout", "native_dropout", "functional_dropout_inplace"):
        kept = first != 0
        torch.testing.assert_close(first[kept], x[kept] / 0.6)   # survivors scaled by 1/(1-p)
        assert 0 < int(kept.sum()) < x.numel()
    if op == "feature_dropout":   # whole channels are dropped together
        per_channel = (first != 0).flatten(2).float()
        assert torch.all((per_channel.mean(-1) == 0) | (per_channel.mean(-1) == 1))


def test_checker_retrace_quiets_only_its_own_thread():
    """Warnings of the checker's retrace are hidden; a bystander's warnings at that moment are shown."""
    meeting_in_retrace = threading.Event()
    bystander_warned = threading.Event()
    calls = [0]

    def f(x):
        if tracejit.is_tracing():
            calls[0] += 1
            warnings.warn(f"from trace run {calls[0]}", UserWarning)
            if calls[0] == 2:   # the checker's retrace
                meeting_in_retrace.set()
                assert bystander_warned.wait(10)
        return x * 2

    def bystander():
        assert meeting_in_retrace.wait(10)
        warnings.warn("from the bystander", UserWarning)
        bystander_warned.set()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_threads(lambda: tracejit.trace(f, (torch.ones(2),), allow_frozen_python_state=True),   # `calls`: a spy
                    bystander)
        filters_inside = list(warnings.filters)
    texts = [str(w.message) for w in caught]
    assert "from trace run 1" in texts and "from the bystander" in texts
    assert "from trace run 2" not in texts
    assert not any("tracejit" in repr(f[1]) for f in filters_inside if f[1] is not None)
    assert_nothing_patched()


def test_many_threads_starting_and_ending_traces_leave_nothing_patched():
    """Installs and removals racing between threads (some traces failing) never leave a stand-in in place."""
    results, failures = [], []

    def worker(k):
        def run():
            for rep in range(8):
                x = torch.randn(2 + (k + rep) % 3)
                if (k + rep) % 4 == 0:
                    try:
                        tracejit.trace(lambda a: a[0] if a.sum() > 1e9 else (_ for _ in ()).throw(ValueError("x")),
                                       (x,), check_trace=False)
                    except ValueError:
                        failures.append(k)
                    continue
                traced = tracejit.trace(lambda a, k=k: torch.sin(a) * k + sum(range(3)), (x,))
                new = torch.randn(x.shape[0] + 1)
                results.append(torch.allclose(traced(new), torch.sin(new) * k + 3))
        return run

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_threads(*[worker(k) for k in range(5)])
    assert results and all(results) and failures
    assert_nothing_patched()


def test_mode_switch_retraces_from_many_threads_at_once():
    """Calling a module traced in eval mode, now in train mode, from several threads: each retrace lends the
    original module's flag and tensors, so they run one at a time and every thread gets train-mode results."""
    import copy
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.Linear(8, 3)).eval()
    traced = tracejit.trace(model, (torch.randn(4, 5),))
    reference = copy.deepcopy(model).train()
    traced.train()
    inputs = [torch.randn(6, 5) for _ in range(4)]
    with torch.no_grad():
        expected = [reference(x) for x in inputs]   # batch statistics: the train-mode path
    got = {}

    def worker(i):
        def run():
            with torch.no_grad():
                got[i] = traced(inputs[i])
        return run

    run_threads(*[worker(i) for i in range(4)])
    for i, x in enumerate(inputs):
        torch.testing.assert_close(got[i], expected[i])
    assert model.training is False                  # the original's flag is back
    assert_nothing_patched()


def test_two_threads_trace_the_same_module_at_the_same_time():
    meeting = Meeting(["a", "b"])
    model = Conv().eval()
    names = iter(["a", "b"])
    lock = threading.Lock()

    def meet_once():
        if tracejit.is_tracing() and not hasattr(_local, "met"):
            _local.met = True
            with lock:
                name = next(names)
            assert meeting.arrive(name)

    _local = threading.local()
    model.meet = lambda name: (meet_once(), True)[1]
    traced = []
    xs = [torch.randn(2, 3, 8, 8), torch.randn(3, 3, 8, 8)]
    run_threads(*[lambda x=x: traced.append(tracejit.trace(model, (x,))) for x in xs])
    model.meet = None
    new = torch.randn(4, 3, 5, 5)
    with torch.no_grad():
        for t in traced:
            torch.testing.assert_close(t(new), model(new))
    assert len(traced) == 2
    assert_nothing_patched()


def test_checker_flags_distribution_samplers_as_torch_jit_does_and_leaves_the_global_stream():
    """Samplers of torch.distributions (_standard_gamma, binomial) are random by ATen's
    ``nondeterministic_seeded`` tag (tracejit/ops/aten.py): the trace flags them, as torch.jit.trace does,
    and warns at their line instead of comparing; the checker's runs draw a private stream, so the global
    generator does not move, and the traced program on a private stream reproduces eager."""
    def sample(rate):
        return torch._standard_gamma(rate) + torch.binomial(rate.round(), rate / (1 + rate))

    rate = torch.rand(5) * 4 + 0.5
    with warnings.catch_warnings(record=True) as reference:
        warnings.simplefilter("always")
        torch.jit.trace(sample, (rate,), check_inputs=[(rate * 2,)])
    assert any("nondeterministic nodes" in str(w.message) and "_standard_gamma" in str(w.message)
               and "binomial" in str(w.message) for w in reference)
    torch.manual_seed(2)
    tracejit.trace(sample, (rate,), check_trace=False)
    after_record_only = torch.get_rng_state()
    torch.manual_seed(2)
    with pytest.warns(tracejit.TracerWarning, match=r"nondeterministic nodes: aten::_standard_gamma.*aten::binomial"):
        traced = tracejit.trace(sample, (rate,), check_inputs=[(rate * 2,)])
    assert torch.equal(torch.get_rng_state(), after_record_only)
    with PrivateRandomness() as rng:
        eager = sample(rate * 3)
        rng.rewind()
        torch.testing.assert_close(traced(rate * 3), eager)


def test_registered_entry_points_are_installed_once_and_act_only_for_the_tracing_thread():
    """patches.register: another process-wide stand-in joins the counted install (here an attribute
    that a class only inherits, which must be deleted again, not set)."""
    from tracejit.trace import patches
    from tracejit.trace.symbolic import get_tracer

    class Base:
        def describe(self):
            return "eager"

    class Child(Base):
        pass

    def make(original):
        def describe(self):
            return "tracing" if get_tracer() is not None else original(self)
        return describe

    seen = {}
    meeting = Meeting(["a", "b"])

    def tracing_fn(name):
        def fn(x):
            seen[name] = Child().describe()
            assert meeting.arrive(name)
            seen[name + " after meeting"] = Child().describe()
            return x + 1
        return fn

    def bystander():
        assert meeting.events["a"].wait(10)
        seen["bystander"] = Child().describe()
        meeting.arrive("b")

    patches.register(Child, "describe", make)
    try:
        run_threads(lambda: tracejit.trace(tracing_fn("a"), (torch.ones(1),), check_trace=False,
                                           allow_frozen_python_state=True), bystander)   # `seen`: a spy
    finally:
        patches._registered.pop()
    assert seen == {"a": "tracing", "a after meeting": "tracing", "bystander": "eager"}
    assert "describe" not in Child.__dict__ and Child().describe() == "eager"
    assert_nothing_patched()


def test_a_stand_in_is_made_once_and_outlives_every_uninstall():
    """A thread outside any trace may still call a stand-in it looked up just before the last trace ended (its
    bound method, CPython's borrowed type-cache entries). tests/threads once died of that: the stand-in's closure
    had been cleared by the garbage collector (a segmentation fault in COPY_FREE_VARS). Each stand-in is now made
    on the first install, reused by every later one, and never freed."""
    import gc
    import weakref
    import tracejit.api  # noqa: F401  (registers the tracer's stand-ins, torch.no_grad's among them)
    from tracejit.trace import patches

    def installed_enter():
        with patches.installed():
            return torch.no_grad.__dict__["__enter__"]

    original = torch.no_grad.__dict__["__enter__"]
    first = installed_enter()
    assert first is not original   # a stand-in was installed
    alive = weakref.ref(first)
    bound = torch.no_grad().__enter__   # looked up while nothing is installed: the original
    del first
    gc.collect()
    assert alive() is not None and alive().__closure__ is not None   # not freed, not cleared
    assert installed_enter() is alive()   # the next install reuses it
    assert torch.no_grad.__dict__["__enter__"] is original and bound.__func__ is original
    context = torch.no_grad()
    alive()(context)   # a call of the kept stand-in outside any trace does what the original does
    assert not torch.is_grad_enabled()
    context.__exit__(None, None, None)
    assert torch.is_grad_enabled()
    assert_nothing_patched()


def test_a_new_registration_for_the_same_attribute_gets_its_own_stand_in():
    """Stand-ins are kept per (attribute, make, original): registering another ``make`` for an attribute after the
    first was removed installs the new one, never the kept one."""
    from tracejit.trace import patches

    class Owner:
        def say(self):
            return "original"

    def maker(word):
        def make(original):
            def say(self):
                return word
            return say
        return make

    for word in ("first", "second"):
        patches.register(Owner, "say", maker(word))
        try:
            with patches.installed():
                assert Owner().say() == word
        finally:
            patches._registered.pop()
        assert Owner().say() == "original"
    assert_nothing_patched()
