"""What a trace cannot check at call time is never frozen silently: Python state, randomness, clocks,
caught exceptions.

A traced program replays PyTorch ops; it cannot replay what forward did in Python. Five kinds of
such things are detected while tracing (``PythonStateWatch``, one per recording):

- **the model's state changed by forward**: for every ``nn.Module`` of the traced hierarchy, its
  attributes (numbers, strings, tensors that are plain attributes, the identity of every other
  object) and the items of its ``list`` / ``dict`` / ``set`` / ``deque`` attributes (shallow), its
  parameter / buffer / submodule entries and its ``training`` flag are snapshot before forward and
  compared after (``self.step += 1``, ``self.ema = ...`` on a buffer, ``self.cache.append(...)``,
  ``self.head.eval()`` left switched). Not refused: a plain tensor attribute (not a buffer) set in
  forward (``self.inner.ctx = x.mean()``: a parent handing a tensor to a submodule, recorded as a
  capture; after a call of the program the attribute still holds the trace-time tensor), a tensor item of
  a container replaced by another tensor (torchvision's ``cell_anchors`` moved with ``.to()``), and an
  attribute that was None and is set by forward (lazy set-up on the first call, torchvision's
  ``MultiScaleRoIAlign.scales``: eager reuses it from then on as the trace does; a ledger entry); both unless
  the user's code reads the attribute before setting it (other than ``is None``) or sets it twice
  (trace/carried_state.py: a value carried to the next call is refused as any changed attribute); and an attribute
  forward writes before any read in the call, seen while tracing (scratch state, trace/first_access.py).
  Not the model's state: nn.Module's bookkeeping dicts, the underscore attributes of torch's layers (RNN's
  ``_flat_weights``); other objects by identity (a random generator by its state: held_state.py);
- **Python's ``random`` and ``numpy.random`` draws** (every module-level function bound to their
  global generators, found by that binding, plus ``numpy.random.default_rng()`` without a seed),
  **clocks** (``time.time`` / ``perf_counter`` / ``monotonic`` / ``process_time`` and their ``_ns``
  forms), **seeding torch's generator from outside the program inside forward** (``torch.seed``,
  ``torch.set_rng_state``; reads of its seed or state: ``torch.initial_seed``, ``torch.get_rng_state``, a
  generator's methods; ``torch.manual_seed`` and a ``torch.Generator`` made inside forward are
  recorded instead: trace/rng_record.py), **the default dtype or device set inside forward**
  (``torch.set_default_dtype`` / ``set_default_tensor_type`` / ``set_default_device``: a factory after it is
  recorded without a dtype and replays in the caller's default; hunt19), **writes torch never shows the trace**
  (``Tensor.set_``, ``torch.utils.swap_tensors``: no TorchFunctionMode sees them; hunt25): stand-ins note the line
  when the caller is the tracing thread's code (not the standard library, numpy, torch or tracejit: trace/patches);
- **an exception raised by a recorded op and caught** by the traced code (``try: x.view(...) except
  RuntimeError: ...``): the trace holds the fallback the example took.

After forward returns, each one found is a ``TraceError`` naming the line and the way out:
``tracejit.trace(..., allow_frozen_python_state=True)`` (also ``trace_module``) accepts the values the
trace froze; each is then a TracerWarning at its line and a ``python_state`` ledger entry.
"""
from __future__ import annotations

import collections
import collections.abc
import inspect
import os
import random
import sys
import sysconfig
import time

import numpy.random as npr   # numpy is a dependency (pyproject.toml)
import torch
from torch import nn

from ..errors import FirstCallSetUpError, TraceError
from ..ir import SourceLoc
from . import data_set_ups, first_access, held_state, not_forward, patches, rewrites
from .carried_state import carried
from .numpy_writes import NumpyViews
from .not_forward import outside_forward
from .source import user_location
from .write_lines import MUTATING_METHODS, _MUTATORS, _assignment_line, _write_patterns  # noqa: F401  (outer_state, global_reads)
from .symbolic import get_tracer

OPT_OUT = "allow_frozen_python_state=True"
_MODULE_BOOKKEEPING = frozenset(nn.Module().__dict__) - {"training", "_parameters", "_buffers", "_modules"}
_CONTAINERS = (list, dict, set, collections.deque, collections.OrderedDict)
# any other mutable container, compared by its items too (default-deny: weakref.WeakKeyDictionary /
# WeakValueDictionary / WeakSet used as a per-module counter or a "seen" set, a user MutableMapping, ...)
_ABSTRACT_CONTAINERS = (collections.abc.MutableMapping, collections.abc.MutableSet, collections.abc.MutableSequence)
_PLAIN = (bool, int, float, complex, str, bytes, type(None))


# ---- the model's state: snapshot before, compare after -------------------------------------------------
def _fingerprint(value):
    if isinstance(value, _PLAIN):
        return ("v", type(value), value)
    if isinstance(value, tuple) and all(isinstance(v, _PLAIN) for v in value):
        return ("v", tuple, value)
    if isinstance(value, dict):
        return ("c", type(value), tuple((k if isinstance(k, _PLAIN) else id(k), _item(v)) for k, v in value.items()))
    if isinstance(value, _CONTAINERS):   # by contents: a container replaced by an equal one is no change
        return ("c", type(value), tuple(_item(v) for v in value))
    if isinstance(value, _ABSTRACT_CONTAINERS) and not isinstance(value, nn.Module):
        try:   # (items listed first: a weak container may lose one while it is read)
            items = list(value.items()) if isinstance(value, collections.abc.Mapping) else list(value)
        except Exception:   # a container that cannot be listed: by identity, as before
            return ("o", id(value))
        if isinstance(value, collections.abc.Mapping):
            return ("c", type(value), tuple((k if isinstance(k, _PLAIN) else id(k), _item(v)) for k, v in items))
        return ("c", type(value), tuple(_item(v) for v in items))
    return held_state.object_fingerprint(value)   # identity; a random generator's state too


def _item(v):
    if isinstance(v, torch.Tensor):
        return ("tensor",)   # a tensor item replaced (torchvision's anchors moved with .to()): as a tensor attribute
    return v if isinstance(v, _PLAIN) else ("id", id(v))


def _own_attributes(m: nn.Module) -> dict:
    torch_layer = type(m).__module__.startswith("torch.")
    out = {}
    for key, value in m.__dict__.items():
        if key in _MODULE_BOOKKEEPING or (torch_layer and key.startswith("_") and key not in (
                "_parameters", "_buffers", "_modules")):
            continue
        if key in ("_parameters", "_buffers"):   # `self.w.data = ...` keeps the object, replaces its storage
            out[key] = tuple((k, id(v), _storage_of(v)) for k, v in value.items())
        elif key == "_modules":
            out[key] = tuple((k, id(v)) for k, v in value.items())
        else:
            out[key] = _fingerprint(value)
    return out


def _storage_of(t):
    """What ``t.data = other`` changes on a parameter / buffer that stays the same object (its storage, shape,
    dtype); None for a tensor without storage (meta, a subclass without one)."""
    if not isinstance(t, torch.Tensor):
        return None
    try:
        return (t.untyped_storage()._cdata, tuple(t.shape), t.dtype, t.storage_offset())
    except Exception:
        return None


def _attributes(m) -> dict:
    if isinstance(m, nn.Module):
        return _own_attributes(m)
    return held_state.attributes(m, _fingerprint)


def snapshot(module: nn.Module | None) -> dict:
    """``{path: (object, fingerprints)}`` of each module, each object a module holds and each user class of the
    hierarchy (trace/held_state.py)."""
    if module is None:
        return {}
    out = {path: (m, _own_attributes(m)) for path, m in module.named_modules(remove_duplicate=True)}
    for path, obj in held_state.held(module).items():
        out.setdefault(path, (obj, _attributes(obj)))
    return out


_ENTRY_KINDS = {"_parameters": "parameter", "_buffers": "buffer", "_modules": "submodule"}
_NONE = NONE_FINGERPRINT = ("v", type(None), None)
ENTRY_KINDS = _ENTRY_KINDS


def _changes(before: dict, lazy: list, codes=(), first=None, scratch=None) -> list:
    """(path, module, attribute) of each change; a changed parameter / buffer / submodule entry by its name.
    Attributes that were None and are set now (lazy set-up on the first call) go to ``lazy`` instead, and plain
    tensor attributes are left out, unless ``codes`` (the user's code that ran) carry the value from one call to
    the next (trace/carried_state.py: read before it is set, or set twice). An attribute forward wrote before any
    read in the call (``first``: trace/first_access.py) goes to ``scratch`` instead (its old value never reached the
    output)."""
    out, first = [], first or {}
    for path, (m, attrs) in before.items():
        now = _attributes(m)
        for key in sorted(set(attrs) | set(now)):
            if attrs.get(key) == now.get(key):
                continue
            written_first = isinstance(key, str) and first.get((id(m), key)) == "store" and key in m.__dict__
            if isinstance(key, str) and carried(key, codes) and not written_first:
                out.append((path, m, key))   # the next call reads what this one set: state, not a set-up
                continue
            if data_set_ups.tensor_attribute(out, path, m, key, attrs.get(key, _NONE) == _NONE):
                continue   # a plain tensor attribute set in forward: a capture (module docstring), or a set-up from data
            if attrs.get(key) == _NONE:
                lazy.append((path, m, key))   # set once, on the first call: eager reuses it as the trace did
                continue
            if key in _ENTRY_KINDS:
                changed = set(attrs.get(key, ())) ^ set(now.get(key, ()))
                out += [(path, m, (key, name)) for name in sorted({entry[0] for entry in changed})]
            elif written_first and scratch is not None:
                scratch.append((path, m, key))   # scratch state: written before any read in this call
            else:
                out.append((path, m, key))
    return out


def _describe(path: str, m: nn.Module, key) -> str:
    where = f"class {m.__qualname__}" if isinstance(m, type) else f"{type(m).__name__} {path!r}" if path else \
        type(m).__name__
    if key == "training":
        return f"forward switched the training flag of {where} (`.train()` / `.eval()` inside forward)"
    if isinstance(key, tuple):
        kind, name = _ENTRY_KINDS[key[0]], key[1]
        return f"forward replaced or added {kind} `{name}` of {where} (`self.{name} = ...` or `self.{name}.data = ...`)"
    value = m.__dict__.get(key)
    if held_state.is_generator(value):
        return f"forward drew from the random generator `{key}` of {where} (its state changed)"
    if isinstance(value, _CONTAINERS + _ABSTRACT_CONTAINERS):
        return (f"forward changed the items of `{key}` of {where} (a {type(value).__name__} used as a cache? one "
                "filled on a first call only is set up by calling the module once before tracing)")
    return (f"forward assigned attribute `{key}` of {where} (e.g. `self.{key} += 1`; or a set-up done once, on a "
            "first call asking for it, as transformers' output capturing: call the module once with the same "
            "arguments before tracing)")


# ---- draws, clocks, seeding: stand-ins note the line ---------------------------------------------------
_STDLIB = os.path.normcase(sysconfig.get_paths()["stdlib"]) + os.sep
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_TRACEJIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_library_files: dict[str, bool] = {}


def _library(filename: str) -> bool:
    r = _library_files.get(filename)
    if r is None:
        norm = os.path.normcase(filename)
        r = (norm.startswith(_STDLIB) and "site-packages" not in norm) or filename.startswith(
            (_TORCH_DIR, _TRACEJIT_DIR, "<tracejit", "<frozen")) or f"{os.sep}numpy{os.sep}" in filename
        _library_files[filename] = r
    return r


def _note(what: str, advice: str):
    def make(original):
        def stand_in(*args, **kwargs):
            tracer = get_tracer()
            caller = sys._getframe(1)
            if tracer is not None and not _library(caller.f_code.co_filename) and not outside_forward(caller):
                watch = getattr(tracer, "python_state", None)
                if watch is not None and not (what.endswith("default_rng()") and (args or kwargs)):
                    watch.found(what, advice, user_location(2))
            return original(*args, **kwargs)
        stand_in.__name__ = getattr(original, "__name__", "stand_in")
        stand_in.__doc__ = getattr(original, "__doc__", None)
        stand_in.__wrapped__ = original
        return stand_in
    return make


_RANDOM_ADVICE = "draw with torch (torch.rand, torch.randint, ...), which the trace records, or pass the value in"
_CLOCK_ADVICE = "pass the value in as an argument"
_DEFAULT_ADVICE = ("pass dtype= / device= to the factory calls instead (torch.ones(3, dtype=torch.float64)); the "
                   "program's factories follow the caller's default at call time")
_UNSEEN_ADVICE = "make a new tensor instead (y = other.clone(), or .copy_() into a tensor of the same shape)"
_SEED_READ_ADVICE = "pass the seed / state in as an argument (the program cannot read a generator's seed or state)"
_SEED_ADVICE = "seed with torch.manual_seed(k) (recorded), seed outside forward, or pass a torch.Generator in"


def _register() -> None:
    for name in dir(random):
        if not name.startswith("_") and getattr(getattr(random, name), "__self__", None) is random._inst:
            patches.register(random, name, _note(f"random.{name}()", _RANDOM_ADVICE))
    for name in ("time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns",
                 "process_time", "process_time_ns", "thread_time", "thread_time_ns"):
        if hasattr(time, name):
            patches.register(time, name, _note(f"time.{name}()", _CLOCK_ADVICE))
    for name in ("seed", "set_rng_state"):   # torch.manual_seed and torch.Generator are recorded (rng_record.py)
        patches.register(torch, name, _note(f"torch.{name}()", _SEED_ADVICE))
        patches.register(torch.random, name, _note(f"torch.{name}()", _SEED_ADVICE))
    for name in ("initial_seed", "get_rng_state"):   # read the global generator: the trace would keep the value
        patches.register(torch, name, _note(f"torch.{name}()", _SEED_READ_ADVICE))
        patches.register(torch.random, name, _note(f"torch.{name}()", _SEED_READ_ADVICE))
    # writes torch does not dispatch to a TorchFunctionMode (the trace never sees them): the program would skip them
    patches.register(torch.Tensor, "set_", _note("Tensor.set_() (a write the trace cannot see)", _UNSEEN_ADVICE))
    patches.register(torch.utils, "swap_tensors", _note("torch.utils.swap_tensors() (a write the trace cannot see)",
                                                        _UNSEEN_ADVICE))
    for name in ("set_default_dtype", "set_default_tensor_type", "set_default_device"):   # factories after it are
        if hasattr(torch, name):   # recorded without a dtype / device and would replay in the caller's default
            patches.register(torch, name, _note(f"torch.{name}()", _DEFAULT_ADVICE))
    legacy = getattr(getattr(npr, "mtrand", None), "_rand", None)
    for name in dir(npr):
        if not name.startswith("_") and legacy is not None and getattr(getattr(npr, name), "__self__", None) is legacy:
            patches.register(npr, name, _note(f"numpy.random.{name}()", _RANDOM_ADVICE))
    patches.register(npr, "default_rng", _note("numpy.random.default_rng()", _RANDOM_ADVICE + " (or seed it)"))


_register()


def generator_call(frame, fn) -> None:
    """The profile hook (frame_returns.py) saw user code in ``frame`` call ``fn``, a method of a ``torch.Generator``
    made outside forward (``torch.default_generator.initial_seed()``, ``g.get_state()``, ``g.manual_seed(k)``):
    the program draws from such a generator but cannot read or reseed it. Default-deny: every method (a generator
    made inside forward is the stand-in's, trace/rng_record.py, and never comes here)."""
    tracer = get_tracer()
    watch = getattr(tracer, "python_state", None) if tracer is not None else None
    if watch is None or outside_forward(frame):
        return
    code = frame.f_code
    watch.found(f"torch.Generator.{getattr(fn, '__name__', '?')}() on a generator made outside forward",
                _SEED_READ_ADVICE, SourceLoc(code.co_filename, frame.f_lineno, code.co_name))


# ---- one recording's watch --------------------------------------------------------------------------------
class PythonStateWatch:
    """Collects what forward did that a traced program cannot replay; ``finish`` refuses or warns."""

    def __init__(self, module: nn.Module | None, allow: bool, before: dict | None = None):
        self.allow, self.module = allow, module
        self.before = snapshot(module) if before is None else before
        self.outer = None   # trace/outer_state.OuterState (globals, closure cells, input containers): set by api.record
        self.issues: list = []   # (what, advice, SourceLoc | None)
        self.first_access: dict = {}   # (id(instance), name) -> "load" / "store": trace/first_access.py
        self.numpy_views = NumpyViews()   # arrays sharing a traced tensor's memory (trace/numpy_writes.py)
        not_forward.reset()
        self._raised: set[int] = set()
        self.rewrites = None   # trace/rewrites.Rewrites: attributes the run before changed, to be written again
        self.read_then_written = rewrites.ReadThenWritten()   # attributes read, then written: a fixed point only
        self.buffers = rewrites.BufferEntries(module)   # a buffer assigned a no-op conversion of itself: put back

    def found(self, what: str, advice: str, loc) -> None:
        if not any(w == what and l == loc for w, _, l in self.issues):
            self.issues.append((what, advice, loc))

    def op_raised(self, func, error: BaseException) -> None:
        """A recorded op raised: if the traced code catches it, the trace holds the fallback it took."""
        if isinstance(error, TraceError) or id(error) in self._raised:
            return
        self._raised.add(id(error))
        name = getattr(func, "__name__", str(func))
        self.found(f"`{name}` raised {type(error).__name__} ({str(error).splitlines()[0][:120] if str(error) else ''}) "
                   "and the traced code caught it: the trace holds the fallback this example took",
                   "check the condition with sizes or dtypes instead of catching the op's error",
                   user_location(3))

    def finish(self, ledger) -> None:
        lazy: list = []
        self.lazy = lazy   # (path, module, attribute) set from None by this forward: trace/api.py's Recording
        self.scratch = scratch = []   # (path, module, attribute) written before any read: trace/first_access.py
        for loc in self.numpy_views.changed():
            self.found("a write into a tensor through its numpy view (`.numpy()` / `np.asarray`)",
                       "write with torch ops, or take a copy (`.numpy().copy()`)", loc)
        self.buffers.restore()
        codes, issues_before, set_ups = tuple(self.outer.forward_codes) if self.outer else (), len(self.issues), 0
        read_then_written = self.read_then_written.problems()   # (a module that sets itself up: the next run's
        for what, loc in read_then_written:                      # trace/rewrites.py checks them again)
            self.found(what, "keep state that changes per call in tensors (buffers updated in place) or outside "
                       "forward", loc)
        for path, m, key in _changes(self.before, lazy, codes, self.first_access, scratch):
            set_ups += data_set_ups.is_set_up(m, key, self.before[path][1], codes)
            key = held_state.DrawnKey(key) if isinstance(key, str) and held_state.is_generator(vars(m).get(key)) else key
            self.found(_describe(path, m, key), "keep state that changes per call in tensors (buffers updated "
                       "in place) or outside forward", _assignment_line(self.module, path, key) or held_state.write_line(m, key, _write_patterns))
        for path, m, key in scratch:
            first_access.plain_size(m, key)
            ledger.add("python_state", f"forward wrote `{key}` of {type(m).__name__} {path!r} before any read in the call "
                       "(scratch state: its old value never reaches the output); a call of the program does not "
                       "write it (it keeps the value it had)", None, None, warn=False)
        for path, m, key in lazy:
            ledger.add("python_state", f"forward set `{key}` of {type(m).__name__} {path!r}, None before: a lazy set-up "
                       "on the first call, which eager reuses as the trace does", None, None, warn=False)
        outer = self.outer.finish() if self.outer is not None else ([], [])
        for what, loc in outer[0]:
            self.found(what, "keep state that changes per call in tensors or outside forward, or return it", loc)
        for what in outer[1]:
            ledger.add("python_state", f"forward set {what}, None before: a lazy set-up on the first call, which "
                       "eager reuses as the trace does", None, None, warn=False)
        if not self.issues:
            return
        if not self.allow:
            lines = [f"  {loc or '(line unknown)'}: {what}; {advice}" for what, advice, loc in self.issues[:6]]
            more = f"\n  ... and {len(self.issues) - 6} more" if len(self.issues) > 6 else ""
            set_up = issues_before == 0 and set_ups > 0 and set_ups + len(read_then_written) == len(self.issues)
            raise (FirstCallSetUpError if set_up else TraceError)(
                "the traced code did something a traced program cannot replay or check at call time; its "
                "trace-time outcome would be frozen silently:\n" + "\n".join(lines) + more +
                f"\nTo accept the frozen values, trace with {OPT_OUT} (each is then a TracerWarning and a "
                "'python_state' entry of traced.ledger).")
        for what, advice, loc in self.issues:
            ledger.add("python_state", f"{what}; the trace froze its outcome ({OPT_OUT}), which "
                       "might cause the trace to be incorrect", loc, None)
