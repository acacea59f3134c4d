"""Seeding inside forward, recorded as the program's own random number generation (issue #20 item 2).

Eager code that seeds inside forward draws the same numbers on every call:

    torch.manual_seed(k); torch.rand(...)                        # the global generator, reseeded
    g = torch.Generator().manual_seed(k); torch.rand(..., generator=g)   # a new generator per call

A trace that froze either would go on drawing from a stream that never restarts. Instead, while a thread
traces, ``torch.manual_seed`` (also as ``torch.random.manual_seed``) and ``torch.Generator`` are stand-ins
(trace/patches.register) that record, at the point forward ran them:

    tracejit::manual_seed[seed=k]()          torch.manual_seed(k): the global generator, as eager leaves it
    %g = tracejit::new_generator[device]()   torch.Generator(device): a generator-typed value
    tracejit::seed_generator[seed=k](%g)     g.manual_seed(k)

and a random op that takes that generator gets the value as its ``generator=`` argument. The seed is an int
in the file (no code); a seed computed from a traced size or a tensor (``int(t)``) is guarded by ``int()``'s
own guard. Every random op recorded after a recorded seed, or drawing from a recorded generator, is marked
``seeded``: dead-code elimination keeps it even when nothing reads its result, because the draw moves the
stream the next draw (and the caller's next draw from the global generator) starts from.

Not recorded, refused by trace/python_state.py with the line and the way out: ``torch.seed()``,
``torch.set_rng_state(...)`` (a seed from the clock, a state tensor), and on a generator made inside forward
every method other than ``manual_seed``, ``initial_seed`` and ``device`` (``g.seed()``, ``g.set_state``,
``g.get_state()``, ...: default-deny). A generator made outside forward stays what it was: a captured object
the program draws from across calls (as torch.jit.trace's).
"""
from __future__ import annotations

import os
import sys

import torch

from ..ir import Node, ScalarType
from ..ops.names import MANUAL_SEED, NEW_GENERATOR, SEED_GENERATOR
from . import patches
from .source import user_location
from .symbolic import get_tracer

GENERATOR = ScalarType("generator")
_TRACEJIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# what forward may ask of a generator it made: the rest is refused (default-deny)
_GENERATOR_ALLOWED = frozenset({"manual_seed", "initial_seed", "device"})
_GENERATOR_ADVICE = ("seed it with g.manual_seed(k), or make the generator outside forward and pass it to the ops; "
                     "the traced program makes a new generator at this point on every call")


def _recording_tracer(depth: int):
    """The tracing thread's tracer when the caller ``depth`` frames up is not tracejit itself, else None."""
    tracer = get_tracer()
    if tracer is None or not tracer.frames:
        return None
    if sys._getframe(depth + 1).f_code.co_filename.startswith(_TRACEJIT_DIR):
        return None
    return tracer


def _seed_value(seed) -> int:
    """``int(seed)`` under DisableTorchFunction off: a traced size or a tensor seed records int()'s guard."""
    return int(seed)


def _add(tracer, op: str, attrs: dict, args=(), out_types=(), loc=None) -> Node:
    node = Node(op, "", args, attrs=attrs, source=loc, effectful=op != NEW_GENERATOR)
    tracer.frame.graph.add_node(node, list(out_types))
    tracer.rng_seeded = True
    return node


def _manual_seed_stand_in(original):
    def manual_seed(seed):
        tracer = _recording_tracer(1)
        if tracer is None:
            return original(seed)
        value = _seed_value(seed)
        result = original(value)   # eager's effect, now: the trace runs forward for real
        _add(tracer, MANUAL_SEED, {"seed": value}, loc=user_location(2))
        return result
    manual_seed.__name__ = getattr(original, "__name__", "manual_seed")
    manual_seed.__qualname__ = getattr(original, "__qualname__", "manual_seed")
    manual_seed.__doc__ = getattr(original, "__doc__", None)
    manual_seed.__wrapped__ = original
    return manual_seed


class RecordedGenerator(torch.Generator):
    """A ``torch.Generator`` made by forward while tracing: a real generator (ops draw from it) whose
    ``manual_seed`` is recorded and whose other state methods are refused."""

    def manual_seed(self, seed):
        tracer = _recording_tracer(1)
        if tracer is None:
            return super().manual_seed(seed)
        value = _seed_value(seed)
        result = super().manual_seed(value)
        v = tracer.generator_value(self)
        if v is not None:
            _add(tracer, SEED_GENERATOR, {"seed": value}, (v,), loc=user_location(2))
        return result

    def __getattribute__(self, name):
        if not name.startswith("_") and name not in _GENERATOR_ALLOWED:
            tracer = _recording_tracer(1)
            watch = getattr(tracer, "python_state", None)
            if watch is not None:
                watch.found(f"`Generator.{name}` of a torch.Generator made inside forward", _GENERATOR_ADVICE,
                            user_location(2))
        return super().__getattribute__(name)


def _generator_stand_in(original):
    """``torch.Generator`` while tracing: a class-like object (``isinstance`` and ``issubclass`` still work)
    whose call, by the tracing thread's code, makes a RecordedGenerator and records it."""

    class _GeneratorType(type):
        def __call__(cls, device="cpu"):
            tracer = _recording_tracer(1)
            if tracer is None:
                return original(device)
            g = RecordedGenerator(device)
            node = _add(tracer, NEW_GENERATOR, {"device": str(g.device)}, out_types=[GENERATOR], loc=user_location(2))
            node.outputs[0].hint = "generator"
            tracer.frame.bind(g, node.outputs[0])
            return g

        def __instancecheck__(cls, obj):
            return isinstance(obj, original)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, original)

        def __getattr__(cls, name):
            return getattr(original, name)

    return _GeneratorType("Generator", (), {"__doc__": original.__doc__, "__module__": original.__module__})


patches.register(torch, "manual_seed", _manual_seed_stand_in)
patches.register(torch.random, "manual_seed", _manual_seed_stand_in)
patches.register(torch, "Generator", _generator_stand_in)
