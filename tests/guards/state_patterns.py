"""Python-state patterns (issue 20, item 2): what forward does that a traced program cannot replay.

Each ``StateCase`` builds a fresh model (``make()``), is traced on ``example`` and then called on
``then``: eager's answer on ``then`` differs from the answer a program that froze the trace-time
outcome gives (torch.jit.trace's), which the tests prove first. The line a refusal must name is
marked ``# @<case name>``. Sources: timm's ModelEmaV2 / fairseq's ``num_updates`` counters, VQ-VAE
EMA codebooks, XLNet-style memories, call counters and histories in module globals and closures, fairseq's
LayerDrop (``np.random`` / ``random.uniform``), SpecAugment crops, samplers seeding from the clock inside
forward, ``try: x.view(...) except RuntimeError`` fallbacks (older torchvision / detectron code).
"""
from __future__ import annotations

import collections
import random
import time
import types
import weakref
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn


@dataclass
class StateCase:
    name: str
    make: Callable          # () -> a fresh module or function
    example: tuple
    then: tuple             # the inputs of the call after tracing
    reseed: Callable | None = None    # reseed(k): seeds the generator the pattern draws from (k=0 trace, 1 then)
    observe: Callable | None = None   # observe(model, output): what differs (default: the output)
    jit_unusable: bool = False        # torch.jit.trace kills the process (segfault, torch 2.13) or its program raises


def r(*shape):
    return torch.randn(*shape, generator=_gen)


_gen = torch.Generator().manual_seed(0)


# ---- the model's state changed by forward ------------------------------------------------------------
class UpdateCounter(nn.Module):          # fairseq / timm EMA: a Python step counter driving a decay
    def __init__(self):
        super().__init__()
        self.updates = 0
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        self.updates += 1  # @update_counter
        decay = min(0.999, (1 + self.updates) / (10 + self.updates))
        return self.lin(x) * decay


class EmaBufferReassigned(nn.Module):    # VQ-VAE EMA codebook statistics, reassigned instead of updated in place
    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.zeros(4))

    def forward(self, x):
        self.running = self.running * 0.9 + x.mean(0) * 0.1  # @ema_buffer_reassigned
        return x - self.running


class ListMemory(nn.Module):             # XLNet / Transformer-XL style memories kept in a Python list
    def __init__(self):
        super().__init__()
        self.mems = []

    def forward(self, x):
        self.mems.append(x.detach())  # @list_memory
        return x + torch.stack(self.mems).mean(0) * len(self.mems)


class DictPositionCache(nn.Module):      # a per-length table calibrated on the first batch, cached in a dict
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        n = int(x.shape[0])
        if n not in self.cache:
            self.cache[n] = torch.arange(n, dtype=x.dtype)[:, None] * x.abs().mean()  # @dict_position_cache
        return x + self.cache[n]


class EvalLeftSwitched(nn.Module):       # MC-dropout toggling a submodule's mode inside forward
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)
        self.calls = torch.zeros(())

    def forward(self, x):
        out = self.drop(x) if self.drop.training else x * 2
        self.drop.eval()  # @eval_left_switched
        return out


class SeenShapes(nn.Module):             # a set of shapes seen, used to warn once / pick a path
    def __init__(self):
        super().__init__()
        self.seen = set()

    def forward(self, x):
        first = tuple(x.shape) not in self.seen
        self.seen.add(tuple(x.shape))  # @seen_shapes
        return x * 3 if first else x


class FrameStack(nn.Module):             # RL frame stacking in a deque
    def __init__(self):
        super().__init__()
        self.frames = collections.deque(maxlen=3)

    def forward(self, x):
        self.frames.append(x)  # @frame_stack
        return torch.cat(list(self.frames), 0).sum(0, keepdim=True) + x


class LazyPythonInit(nn.Module):         # data-dependent init flagged with a Python bool (Glow ActNorm variants)
    def __init__(self):
        super().__init__()
        self.initialized = False
        self.loc = nn.Parameter(torch.zeros(4))

    def forward(self, x):
        if not self.initialized:
            with torch.no_grad():
                self.loc.copy_(-x.mean(0))
            self.initialized = True  # @lazy_python_init
        return x + self.loc


class SampleCount(nn.Module):            # a running count of samples seen, from a size
    def __init__(self):
        super().__init__()
        self.count = 0

    def forward(self, x):
        self.count = self.count + x.size(0)  # @sample_count
        return x / self.count


class ShuffledOrder(nn.Module):          # heads / layers visited in a shuffled order kept on the module
    def __init__(self):
        super().__init__()
        self.order = [0, 1, 2, 3]
        self.rng = random.Random(0)

    def forward(self, x):
        self.rng.shuffle(self.order)  # @shuffled_order
        return x[:, self.order]


# ---- Python state outside the modules: globals and closure cells (trace/outer_state.py, hunt19) ----------
_CALLS = {"n": 0}


def counted_calls(x):                    # a module-level call counter in a plain function
    _CALLS["n"] += 1  # @global_dict_counter
    return x * _CALLS["n"]


def _fresh_counted_calls():
    _CALLS["n"] = 0
    return counted_calls


_STEP = 0


class GlobalStep(nn.Module):             # `global step; step += 1` driving an alternating sign (warm-up schedules)
    def forward(self, x):
        global _STEP
        _STEP += 1  # @global_step
        return x * (1.0 if _STEP % 2 else -1.0)


def _fresh_global_step():
    global _STEP
    _STEP = 0
    return GlobalStep()


def closure_counter():                   # a counter kept in a closure (`nonlocal`)
    calls = 0

    def forward(x):
        nonlocal calls
        calls += 1  # @closure_counter
        return x + calls
    return forward


def closure_history():                   # a history list kept in a closure, read back
    history = []

    def forward(x):
        history.append(float(x.shape[0]))  # @closure_history
        return x * len(history)
    return forward


# ---- randomness, clocks, seeding -----------------------------------------------------------------
def python_layerdrop(x):                 # fairseq-style LayerDrop with Python's random
    if random.uniform(0, 1) < 0.5:  # @python_layerdrop
        return x
    return x * 2 + 1


def numpy_layerdrop(x):
    if np.random.random() < 0.5:  # @numpy_layerdrop
        return x
    return x * 2 + 1


def numpy_random_crop(x):                # SpecAugment-style time mask offsets drawn with numpy
    t0 = np.random.randint(0, 2)  # @numpy_random_crop
    return x[:, t0:t0 + 2] * 1.0


def python_randint_shift(x):
    k = random.randint(1, 3)  # @python_randint_shift
    return torch.roll(x, k, dims=-1)


def numpy_default_rng(x):
    noise = np.random.default_rng().standard_normal(x.shape[-1])  # @numpy_default_rng
    return x + torch.from_numpy(noise).float()


def clock_phase(x):                      # a time-dependent phase (streaming demos)
    return x * (time.time() % 1.0)  # @clock_phase


# modulo a prime near 1e6, the trace's reading and a later call's agree in ~1e-6 of runs (modulo 1000: in 1e-3, a
# spurious failure of test_eager_moves_and_torch_jit_trace_silently_freezes seen in session 31)
def timestamp_feature(x):                # a timestamp feature from a monotonic clock
    return x + (time.perf_counter_ns() % 1000003) / 1000003  # @timestamp_feature


def clock_seeded_noise(x):               # torch.seed(): a seed from the clock (manual_seed is recorded: test_recorded_rng)
    torch.seed()  # @clock_seeded_noise
    return x + torch.randn(x.shape)


def generator_clock_seeded(x):           # a generator made in forward, seeded from the clock
    g = torch.Generator()
    g.seed()  # @generator_clock_seeded
    return x + torch.randn(x.shape, generator=g)


# ---- hunt25: weak containers, `.data =`, reading torch's generators ------------------------------------------
_WEAK_CALLS = weakref.WeakKeyDictionary()


class WeakKeyCounter(nn.Module):         # a per-module call count kept outside the module, by weak reference
    def forward(self, x):
        _WEAK_CALLS[self] = _WEAK_CALLS.get(self, 0) + 1  # @weak_key_counter
        return x * _WEAK_CALLS[self]


class _Token:   # a weak-referenceable object
    pass


class WeakSeenSet(nn.Module):            # "seen" bookkeeping in a WeakSet attribute: the first call differs
    def __init__(self):
        super().__init__()
        self.seen = weakref.WeakSet()
        self.token = _Token()

    def forward(self, x):
        y = x * 2 if self.token in self.seen else x
        self.seen.add(self.token)  # @weak_seen_set
        return y


class ParamDataAssign(nn.Module):        # a weight rescaled through `.data` in forward (weight-norm style hacks)
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x):
        out = x * self.w
        self.w.data = self.w.data * 2  # @param_data_assign
        return out


class LastLength(nn.Module):             # "same length as the last call?" (streaming models reusing a cache)
    def __init__(self):
        super().__init__()
        self.last = None

    def forward(self, x):
        out = x * 2 if self.last == x.shape[0] else x
        self.last = x.shape[0]  # @last_length
        return out


class RecurrentHidden(nn.Module):        # a hidden state kept on the module between calls (streaming RNN cells)
    def __init__(self):
        super().__init__()
        self.h = None

    def forward(self, x):
        if self.h is None:
            self.h = torch.zeros_like(x)  # @recurrent_hidden
        self.h = 0.5 * self.h + x
        return self.h


class ClassLevelCounter(nn.Module):      # a count shared by all instances, kept on the class
    calls = 0

    def forward(self, x):
        type(self).calls += 1  # @class_level_counter
        return x * type(self).calls


def _fresh_class_level_counter():
    ClassLevelCounter.calls = 0
    return ClassLevelCounter()


class HeldNamespace(nn.Module):          # state in a plain object the module holds
    def __init__(self):
        super().__init__()
        self.state = types.SimpleNamespace(n=0)

    def forward(self, x):
        self.state.n += 1  # @held_namespace
        return x * self.state.n


class PositionTable:                     # a plain helper object with a private per-length cache (hunt26)
    def __init__(self):
        self._cache = {}

    def counts(self, n):
        if n not in self._cache:
            self._cache[n] = torch.zeros(n)  # @held_private_cache
        table = self._cache[n]
        table.add_(1)   # eager's next call reuses and updates the cached tensor
        return table


class HeldPrivateCache(nn.Module):       # the cache is the held object's, private by name: still state
    def __init__(self):
        super().__init__()
        self.table = PositionTable()

    def forward(self, x):
        return x * self.table.counts(x.shape[-1])


def initial_seed_read(x):                # a seed-dependent offset: torch.initial_seed() read in forward
    return x * (torch.initial_seed() % 7)  # @initial_seed_read


def rng_state_read(x):                   # the global generator's state as data
    return x + torch.get_rng_state()[:4].float()  # @rng_state_read


def generator_method_read(x):            # the same through the generator object's own method
    return x * (torch.default_generator.initial_seed() % 7)  # @generator_method_read


_reseed_torch = lambda k: torch.manual_seed(100 + k)   # noqa: E731


# ---- exception-driven fallbacks --------------------------------------------------------------------------
def view_fallback(x):
    try:
        return x.view(-1)  # @view_fallback
    except RuntimeError:
        return x.reshape(x.size(0), -1) * 2


def index_fallback(x):
    try:
        return x[torch.tensor([5])] * 2  # @index_fallback
    except IndexError:
        return x[:1]


CASES = [
    StateCase("update_counter", UpdateCounter, (r(2, 4),), (r(2, 4),)),
    StateCase("ema_buffer_reassigned", EmaBufferReassigned, (r(3, 4),), (r(3, 4),)),
    StateCase("list_memory", ListMemory, (r(2, 4),), (r(2, 4),)),
    StateCase("dict_position_cache", DictPositionCache, (r(3, 1),), (r(3, 1),)),
    StateCase("eval_left_switched", lambda: EvalLeftSwitched().train(), (r(2, 4),), (r(2, 4),)),
    StateCase("seen_shapes", SeenShapes, (r(2, 4),), (r(2, 4),)),
    StateCase("frame_stack", FrameStack, (r(1, 4),), (r(1, 4),)),
    StateCase("lazy_python_init", LazyPythonInit, (r(3, 4),), (r(3, 4),), jit_unusable=True),
    StateCase("sample_count", SampleCount, (r(2, 4),), (r(2, 4),)),
    StateCase("shuffled_order", ShuffledOrder, (r(2, 4),), (r(2, 4),)),
    StateCase("global_dict_counter", _fresh_counted_calls, (r(4),), (r(4),)),
    StateCase("global_step", _fresh_global_step, (r(4),), (r(4),)),
    StateCase("closure_counter", closure_counter, (r(4),), (r(4),)),
    StateCase("closure_history", closure_history, (r(4),), (r(4),)),
    StateCase("python_layerdrop", lambda: python_layerdrop, (r(4),), (r(4),), reseed=lambda k: random.seed(k)),
    StateCase("numpy_layerdrop", lambda: numpy_layerdrop, (r(4),), (r(4),), reseed=lambda k: np.random.seed(k)),
    StateCase("numpy_random_crop", lambda: numpy_random_crop, (r(2, 6),), (r(2, 6),),
              reseed=lambda k: np.random.seed(k + 1)),
    StateCase("python_randint_shift", lambda: python_randint_shift, (r(2, 6),), (r(2, 6),),
              reseed=lambda k: random.seed(k * 3)),
    StateCase("numpy_default_rng", lambda: numpy_default_rng, (r(2, 6),), (r(2, 6),)),
    StateCase("clock_phase", lambda: clock_phase, (r(4),), (r(4),)),
    StateCase("timestamp_feature", lambda: timestamp_feature, (r(4),), (r(4),)),
    StateCase("clock_seeded_noise", lambda: clock_seeded_noise, (r(4),), (r(4),)),
    StateCase("generator_clock_seeded", lambda: generator_clock_seeded, (r(4),), (r(4),)),
    StateCase("weak_key_counter", WeakKeyCounter, (r(4),), (r(4),)),
    StateCase("weak_seen_set", WeakSeenSet, (r(4),), (r(4),)),
    StateCase("param_data_assign", ParamDataAssign, (r(4),), (r(4),), observe=lambda m, out: m.w.detach().clone()),
    StateCase("last_length", LastLength, (r(4),), (r(4),)),
    StateCase("recurrent_hidden", RecurrentHidden, (r(4),), (r(4),)),
    StateCase("class_level_counter", _fresh_class_level_counter, (r(4),), (r(4),)),
    StateCase("held_namespace", HeldNamespace, (r(4),), (r(4),)),
    StateCase("held_private_cache", HeldPrivateCache, (r(4),), (r(4),)),
    StateCase("initial_seed_read", lambda: initial_seed_read, (r(4),), (r(4),), reseed=_reseed_torch),
    StateCase("rng_state_read", lambda: rng_state_read, (r(4),), (r(4),), reseed=_reseed_torch),
    StateCase("generator_method_read", lambda: generator_method_read, (r(4),), (r(4),), reseed=_reseed_torch),
    StateCase("view_fallback", lambda: view_fallback, (r(4, 3).t(),), (r(3, 4),), jit_unusable=True),
    StateCase("index_fallback", lambda: index_fallback, (r(3),), (r(8),), jit_unusable=True),
]
