"""A recording run again, with submodule calls traced through, when a tensor escaped a finished call.

A submodule call is recorded by its inputs and outputs (a ``call_module`` node). A tensor the call computed that
reaches its caller another way (transformers' output capturing: forward hooks store each layer's output, and the
model returns them as ``hidden_states``; a list passed in and appended to) is unknown to the caller: trace/escapes.py
stops the recording there, naming the submodule. torch.jit's tracer records one flat graph, so the tensor is simply
known. tracejit then records the forward again with those submodule calls traced through in place
(trace/through.py: their ops go into the caller's graph; their own submodules stay calls), and the tensor is known
where it is read.

Running forward a second time is allowed only where the first run changed nothing a caller can see
(``Attempt.changed``): no in-place write to an input, a parameter, a buffer or a tensor attribute of the module
(their version counters) or to any other tensor the run did not make (a global, a closure's, an item of a
container attribute: trace/captured_writes.py lists each in-place write to them; a write through ``.data`` or a
detached alias of a parameter, buffer or input is found by its storage, one through a numpy view by
trace/numpy_writes.py), no Python attribute of the hierarchy changed (trace/python_state.py's snapshot) but
for set-ups (an attribute the module did not have, or had as None: eager's second call finds them done too) and
scratch attributes (written before any read in the run, trace/first_access.py: the next run writes them first).
Random draws (dropout in train mode, ``torch.rand``): a second run drawing again from torch's global generator
would leave it one call further than eager's; putting its state back would be seen by every other thread
(runtime/private_rng.py). *Decision (hunt30):* the second run draws from private generators started from the
global cpu generator's state before the first run (runtime/private_rng.PrivateRandomness, a mode of the tracing
thread only: the global generator is read, never set), so it draws the first run's numbers and the caller's
generator ends where one eager call leaves it, as torch.jit's tracer leaves it. Allowed only where every draw of
the first run was one that mode redirects (ops taking ``generator=``, the dropout family), on cpu, and forward
seeded nothing (``Attempt.redrawable``); else the escape stays refused (a draw inside a C++ op, such as
``scaled_dot_product_attention``'s dropout, takes no generator; another device's generator is not copied). A ``trace_module`` shares no method the failed
run registered. Where the first run did change something, the escape stays a TraceError, which says what. Warnings
the first run gave are not given again.

The same second run records a module whose first call only set itself up (python_state.FirstCallSetUpError:
every Python-state change sets an attribute the module did not have, such as transformers' output capturing
``_output_capturing_hooks_installed``): the second run starts from what the first left, as eager's second call, and
its own checks see any state that changes per call.

>>> import torch, tracejit
>>> class Block(torch.nn.Module):   # hands each step's tensor out through a list, as hidden states are collected
...     def __init__(self):
...         super().__init__()
...         self.lin = torch.nn.Linear(2, 2)
...     def forward(self, x, trail):
...         trail.append(self.lin(x))
...         return trail[-1].relu()
>>> class Model(torch.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.block = Block()
...     def forward(self, x):
...         trail = []
...         return self.block(x, trail), trail[0]
>>> model = Model()
>>> with torch.no_grad():
...     traced = tracejit.trace(model, torch.ones(1, 2))
...     x = torch.randn(3, 2)
...     torch.equal(traced(x)[1], model(x)[1])
True
"""
from __future__ import annotations

import torch
from torch import nn

import contextlib

from .. import ops as op_facts
from ..pytree import flatten
from . import python_state, rewrites

# runtime/private_rng.PrivateRandomness, a higher layer's class: tracejit/api.py installs it (use_private_randomness)
_private_randomness = None


def use_private_randomness(cls) -> None:
    """The mode a second run draws its random numbers in (runtime/private_rng.PrivateRandomness)."""
    global _private_randomness
    _private_randomness = cls

MAX_ATTEMPTS = 8   # each retry traces at least one more submodule path through: bounded by the hierarchy's depth


def _version(t: torch.Tensor):
    try:
        return t._version
    except RuntimeError:   # an inference tensor keeps no version counter
        return None


class Attempt:
    """What a caller could see of one recording run: taken before it, compared after it failed."""

    def __init__(self, args, kwargs, module: nn.Module | None, registry):
        leaves, _ = flatten((tuple(args), dict(kwargs)))
        tensors = {id(t): ("an input", t) for t in leaves if isinstance(t, torch.Tensor)}
        if module is not None:
            for name, t in list(module.named_parameters()) + list(module.named_buffers()):
                tensors.setdefault(id(t), (f"'{name}'", t))
            for path, m in module.named_modules():
                for key, value in vars(m).items():
                    if isinstance(value, torch.Tensor):
                        tensors.setdefault(id(value), (f"attribute '{path + '.' if path else ''}{key}'", value))
        self.versions = [(what, t, _version(t)) for what, t in tensors.values()]
        self.storages = {}   # data pointer -> what: a write through `.data` / `.detach()` keeps the version counter
        for what, t in tensors.values():
            try:
                if t.untyped_storage().data_ptr():
                    self.storages.setdefault(t.untyped_storage().data_ptr(), what)
            except Exception:  # noqa: BLE001  (no storage: a subclass, meta, sparse)
                pass
        self.written_storages: set = set()   # the run's written storages (trace/api._record_run sets it)
        self.inference = torch.is_inference_mode_enabled()
        self.python = python_state.snapshot(module)
        self.ledger = None   # the run's ledger (trace/api._record_run sets it): its random draws
        self.watch = None    # the run's python_state.PythonStateWatch (set there too): its first accesses
        self.outside_writes: list = []   # the run's in-place writes to tensors held outside (set there too)
        self.registry = registry
        self.rewrites = None   # set by changed(): what the next run must write again (trace/rewrites.py)
        self.methods = None if registry is None else [{p: dict(d) for p, d in part.items()} for part in registry]
        self.draws = None   # the run's random draws (the tracer's list, set by trace/api._record_run)
        self.rng_before = None   # torch's cpu generator state before the first run (set by trace/api.record)

    def changed(self) -> str | None:
        """What the failed run changed that a caller can see (None: nothing), in words."""
        for what, t, before in self.versions:
            now = _version(t)
            if now is None and self.inference:   # default-deny: nothing tells whether it was written
                return (f"{what} is an inference tensor, which keeps no version counter, so an in-place write to it "
                        "cannot be ruled out (trace under torch.no_grad() instead of torch.inference_mode())")
            if now != before:
                return f"{what} was written in place"
        for ptr in self.written_storages:
            if ptr in self.storages:
                return f"{self.storages[ptr]} was written in place (through `.data` or a detached alias)"
        views = self.watch.numpy_views.changed() if self.watch is not None else []   # unseen by torch (numpy_writes)
        if views:
            return f"a tensor was written through its numpy view (at {views[0] or '(line unknown)'})"
        if self.outside_writes:   # a global, a closure's, a container attribute's tensor: versions nobody listed
            return f"{self.outside_writes[0]} was written in place"
        rewritten = []   # attributes the next run must write again identically (trace/rewrites.py)
        for path, (obj, attrs) in self.python.items():
            now = python_state._attributes(obj)
            for key in set(attrs) | set(now):
                if key not in attrs or attrs[key] == python_state.NONE_FINGERPRINT:
                    continue   # a set-up on the first call: eager's second call finds it done too
                if self.watch is not None and self.watch.first_access.get((id(obj), key)) == "store":
                    continue   # scratch: written before any read, so the next run writes it again first
                if attrs.get(key) != now.get(key):
                    if not isinstance(key, str) or key == "training" or key in python_state.ENTRY_KINDS or \
                            key not in vars(obj) or not isinstance(obj, nn.Module):
                        return f"attribute {key!r} of {'the module' if not path else repr(path)} changed"
                    rewritten.append((path, obj, key))   # accepted if the next run writes it again identically
        drawn = [e for e in (self.ledger.entries if self.ledger is not None else ()) if e.kind == "nondeterministic"]
        if drawn and not self.redrawable():
            return f"it drew random numbers ({drawn[0].message} at {drawn[0].source})"
        self.rewrites = rewrites.Rewrites(rewritten) if rewritten else None
        return None

    def redrawable(self) -> bool:
        """Can a second run draw its random numbers from private generators (runtime/private_rng.py), leaving torch's
        global generator where the first run left it (as after one eager call, and as torch.jit's tracer leaves
        it)? Only where every draw was one PrivateRandomness redirects (an op taking ``generator=``, the dropout
        family), on cpu (default-deny: another device's generator is not copied here), and forward seeded nothing
        (``torch.manual_seed`` in forward sets the global generator itself: rng_record.py)."""
        draws = self.draws if self.draws is not None else [(None, None, True)]
        return all(base is not None and not seeded and device is not None and device.type == "cpu" and
                   (op_facts.takes_generator(base) or op_facts.is_dropout(base) or base == "native_dropout")
                   for base, device, seeded in draws)

    def private_randomness(self):
        """A context for the next run: its random ops draw from private generators that start where torch's global
        cpu generator was before the FIRST run (so the second run draws the first run's numbers); the global
        generator is only read (other threads see nothing). A plain context where the first run drew nothing."""
        if not self.draws:
            return contextlib.nullcontext()
        private = _private_randomness()
        start = self.rng_before if self.rng_before is not None else torch.default_generator.get_state()
        generator = torch.Generator(device="cpu")
        generator.set_state(start)
        private._generators[torch.device("cpu")] = (generator, start)
        return private

    def rewind(self) -> None:
        """Put back the methods the failed run registered (shared by a trace_module's methods)."""
        if self.registry is not None:
            for part, kept in zip(self.registry, self.methods):
                part.clear()
                part.update(kept)
