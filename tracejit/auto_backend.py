"""``optimize_for_inference(traced, backend="auto")``: build the backends that apply, time them, keep the fastest.

Candidates, in this order (cheapest to build first): ``traced`` (the traced program as given),
``torch`` (the default ``optimize_for_inference``: frozen, inference passes, CPU kernels), ``cuda_graphs``
(that program replayed from CUDA graphs: only for a program on a CUDA device),
``onnxruntime`` and ``openvino`` (the exported ONNX model; each only when its package is installed and the
program runs on the CPU).
A candidate that cannot be built, or whose answer on the example inputs is not as exact as the traced
program's (auto_exactness.py: ``assert_close`` at ``rtol = atol = 1e-4`` of the output's scale and, where
the traced object holds its original module, no further from the original's float64 answer than the
traced program itself or, for a candidate built after the torch backend's program, than that program;
the float64 test alone keeps a detector's thresholded boxes), is left out and the
report says why: a backend nobody measured is never chosen (default-deny). So is an exported candidate whose
runtime could not answer the example inputs itself, the traced program answering for it, and the report says why
(Mask R-CNN at batch 8: onnxruntime's boxes move a truncated ``int(box)``, so the run fails on the mask paste's
slice, ``ScatterND ... updates shape {0,2}``; every call would pay both programs).

Timing, made for a machine other processes load (load only ever adds time to a call): each candidate
built is warmed up (``WARMUP_CALLS`` calls after the check's one: first calls allocate, fill caches and
let onnxruntime / oneDNN pick kernels), then all are called in interleaved rounds (each round starts
one candidate later, so none always runs after the same one), one timed call each per round, made
warm: a short call is preceded by up to ``MAX_PRIMING_CALLS`` untimed ones of its own (``priming_calls``:
right after other candidates a short call runs cold, and the candidate that suffers least from that is not
the fastest one a server calling it over and over sees), for ``budget_s`` seconds and at least ``MIN_ROUNDS`` rounds. Each candidate is ranked by the lower quartile of
its calls (a call slowed by another process says nothing about the candidate; the minimum alone would
trust one lucky call); the fastest wins, the earlier candidate on a tie (the cheaper to build). Building
is bounded apart: no candidate starts building once ``build_budget_s`` seconds have passed (the plain
traced program is always there), so a slow first build (freezing a large model) does not leave the
ONNX backends unmeasured, and the whole choice takes at most ``build_budget_s`` plus one build, plus
``budget_s`` and ``MIN_ROUNDS`` rounds. Time is read from ``clock`` (``time.perf_counter``; tests inject
a fake one). The report gives each candidate's lower quartile and median, and the rounds timed.

The example inputs are ``example_inputs`` when given, else the traced program's stored ones
(``traced.example_inputs``, kept by ``trace``), else tensors of the recorded input types (floats ``randn``, integers
zeros, booleans ``True``).

``AutoProgram.save(f)`` saves the traced program with the choice (docs/FORMAT.md, extra file
``tracejit.backend.json``); ``optimize_for_inference(tracejit.load(f), backend="auto")`` then builds
that backend without measuring again.
"""
from __future__ import annotations

import importlib.util
import time
from typing import Callable

import torch

from .auto_exactness import check_same, float64_reference
from .backends import protocol
from .backends.typed_inputs import inputs_of_types
from .passes.inline import inline_calls
from .passes.pipeline import program_device
from .passes.written import writes_state
from .runtime.state import ModuleState
from .serialize.archive import save
from .serialize.file_format import BACKEND_CHOICE_FILE, BACKEND_CHOICES, encode_choice, parse_choice  # noqa: F401

CANDIDATES = BACKEND_CHOICES
CHOICE_FILE = BACKEND_CHOICE_FILE
DEFAULT_BUDGET_S = 3.0         # seconds of timing
DEFAULT_BUILD_BUDGET_S = 120.0  # no candidate starts building after this (an ONNX export of a large model: ~10 s)
MIN_ROUNDS = 8      # a lower quartile needs a few calls: with 8, two slowed calls of each candidate are ignored
WARMUP_CALLS = 2
MAX_PRIMING_CALLS = 3   # untimed calls before each timed call of a short-running candidate (priming_calls)
PRIMING_S = 0.005
_MAX_ROUNDS = 200
# an exported candidate whose own run did not answer the example (backends/onnx_call.py ``_hand_over``): each such
# call costs its run plus the traced program's, so it is never the fastest and timing it only spends build time
HANDED_OVER = ("left out: the traced program answered the example inputs for it (a guard output failed in its "
               "runtime, or its run failed on one): such a call costs its run and the traced program's")


class AutoProgram:
    """The fastest backend ``optimize_for_inference(backend="auto")`` found; call it like the traced program.

    ``backend``: the chosen candidate's name; ``report``: one line per candidate (its times, or
    why it was left out); ``timings``: candidate -> seconds per call (the lower quartile of its timed
    calls, what the choice compared); ``program``: the chosen program itself.
    """

    def __init__(self, source, program, backend: str, report: str, timings: dict[str, float]):
        self.source, self.program, self.backend, self.report, self.timings = source, program, backend, report, timings
        self._call = program.__call__

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def save(self, f, **options) -> None:
        """Save the traced program with this choice: loading it and asking for ``backend="auto"``
        builds ``self.backend`` without measuring again."""
        save(self.source, f, extra_files={CHOICE_FILE: encode_choice(self.backend, self.report)}, **options)

    def __repr__(self) -> str:
        return f"<AutoProgram backend={self.backend!r}>"


def optimize_auto(traced, *, budget_s: float = DEFAULT_BUDGET_S, build_budget_s: float = DEFAULT_BUILD_BUDGET_S,
                  example_inputs=None, candidates=CANDIDATES,
                  clock: Callable[[], float] = time.perf_counter) -> AutoProgram:
    """Build each applicable candidate (none started after ``build_budget_s`` seconds), time them on the
    example inputs for ``budget_s`` seconds, return the fastest as an ``AutoProgram`` (module docstring).
    ``candidates`` narrows the list."""
    unknown = [c for c in candidates if c not in CANDIDATES]
    if unknown or not candidates:
        raise ValueError(f"optimize_for_inference(backend='auto'): unknown candidates {unknown}; "
                         f"expected a non-empty subset of {CANDIDATES}")
    for label, value in (("budget_s", budget_s), ("build_budget_s", build_budget_s)):
        if not (isinstance(value, (int, float)) and value > 0):
            raise ValueError(f"optimize_for_inference(backend='auto'): {label} must be > 0; got {value!r}")
    saved = getattr(traced, "saved_backend_choice", None)
    if saved is not None and saved["backend"] in candidates:
        program = _build(saved["backend"], traced)
        return AutoProgram(traced, program, saved["backend"], f"saved choice (not measured again): {saved['backend']}\n"
                           + saved["report"], {})
    args, kwargs = _example_inputs(traced, example_inputs)
    state = ModuleState(traced if isinstance(traced, torch.nn.Module) else None)
    try:
        return _measure_and_choose(traced, args, kwargs, candidates, budget_s, build_budget_s, clock, state)
    finally:
        state.restore_written()   # the measured calls wrote the caller's buffers (a counter in forward): put back


def _measure_and_choose(traced, args, kwargs, candidates, budget_s, build_budget_s, clock, state) -> "AutoProgram":
    start = clock()
    build_until = start + build_budget_s
    with torch.no_grad():
        expected = traced(*args, **kwargs)
    float64 = float64_reference(traced, args, kwargs)   # computed only where a candidate needs it
    built, notes, accepted, torch_answer = {}, {}, {}, None
    for name in candidates:
        if built and clock() >= build_until:
            notes[name] = "not built: the budget was spent"
            continue
        why = _unavailable(name, traced)
        if why:
            notes[name] = why
            continue
        try:
            state.restore_written()   # each candidate starts from the state the expected answer started from
            program = _build(name, traced)
            with torch.no_grad():
                got = program(*args, **kwargs)
                accepted[name] = check_same(got, expected, float64, peer=torch_answer)
        except Exception as e:  # noqa: BLE001  (a candidate that fails is left out, with the reason)
            notes[name] = f"left out: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
            continue
        if getattr(program, "handed_over", 0):
            reason = getattr(program, "hand_over_reason", "")
            notes[name] = HANDED_OVER + (f" (the last: {reason})" if reason else "")
            continue
        built[name] = program
        if name == "torch":
            torch_answer = got   # the later candidates are measured against it too (auto_exactness.py)
    if not built:
        raise RuntimeError("optimize_for_inference(backend='auto'): no candidate could be built:\n"
                           + "\n".join(f"  {k}: {v}" for k, v in notes.items()))
    samples = _time_rounds(built, args, kwargs, budget_s, clock, program_device(traced).startswith("cuda"))
    timings = {name: lower_quartile(v) for name, v in samples.items()}
    best = choose(timings)
    rounds = len(next(iter(samples.values())))
    lines = [f"chose {best}: fastest lower quartile per call on the example inputs ({len(built)} candidates, "
             f"{rounds} interleaved rounds after {WARMUP_CALLS} warm-up calls; {clock() - start:.2f}s)"]
    if best != "traced" and writes_module_state(traced):
        # the chosen program holds its own copy of the buffers forward writes, moved on by every measured call:
        # built again from the caller's state, put back first
        state.restore_written()
        built[best] = _build(best, traced)
        lines.append("  (forward writes module state: the chosen program was built again after the measurement)")
    for name in candidates:
        if name in timings:
            lines.append(f"  {name}: {timings[name] * 1e6:.1f} us (median {_median(samples[name]) * 1e6:.1f} us)"
                         + (f"; {accepted[name]}" if accepted.get(name) else ""))
        else:
            lines.append(f"  {name}: {notes[name]}")
    return AutoProgram(traced, built[best], best, "\n".join(lines), timings)


def writes_module_state(traced) -> bool:
    """Does the traced forward write a parameter, buffer or captured tensor in place (``self.count += 1``)?"""
    graph = getattr(traced, "graph", None)
    if graph is None:
        return False
    return writes_state(inline_calls(graph))


def lower_quartile(samples: list[float]) -> float:
    """The lower quartile of ``samples`` (the smallest for fewer than 4): what a candidate is ranked by."""
    ordered = sorted(samples)
    return ordered[(len(ordered) - 1) // 4]


def choose(timings: dict[str, float]) -> str:
    """The fastest candidate; on a tie the first (candidates are in the order cheapest to build first)."""
    return min(timings, key=lambda name: (timings[name], list(timings).index(name)))


def _median(samples: list[float]) -> float:
    ordered = sorted(samples)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def priming_calls(last_sample: float | None) -> int:
    """Untimed calls a candidate makes right before its timed call in a round: a short call made just after
    another candidate's runs cold (the other's weights and buffers took the caches; roberta at batch 8 here:
    2x its steady time after one call of each other candidate, steady after 2-3 calls of its own). Priming
    times each candidate as a server calling it over and over (and bench/ scripts) see it. Up to
    ``MAX_PRIMING_CALLS``, as many as fit in ``PRIMING_S`` at the candidate's last timed call (none in the first
    round: nothing is known yet, and three more calls of a 1 s model would cost more than its cold start; that
    round's cold call is one sample of many); a call of ``PRIMING_S`` or longer is not primed (its own cold start
    is a small part of it)."""
    if last_sample is None:
        return 0
    if last_sample <= 0:
        return MAX_PRIMING_CALLS
    return 0 if last_sample >= PRIMING_S else min(MAX_PRIMING_CALLS, int(PRIMING_S / last_sample))


def _time_rounds(built: dict, args, kwargs, budget_s: float, clock, on_cuda: bool = False) -> dict[str, list]:
    """Seconds of each timed call of each candidate: ``WARMUP_CALLS`` untimed calls each, then interleaved
    rounds for ``budget_s`` seconds and at least ``MIN_ROUNDS`` rounds, each candidate's timed call made
    after its ``priming_calls``. On CUDA each call is waited for
    (launches are asynchronous: without a sync a call would be timed by its launches only)."""
    names = list(built)
    samples: dict[str, list[float]] = {n: [] for n in names}
    with torch.no_grad():
        for _ in range(WARMUP_CALLS):
            for name in names:
                built[name](*args, **kwargs)
        if on_cuda:
            torch.cuda.synchronize()
        deadline = clock() + budget_s
        for r in range(_MAX_ROUNDS):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                primes = priming_calls(samples[name][-1] if samples[name] else None)
                for _ in range(primes):
                    built[name](*args, **kwargs)
                if on_cuda and primes:
                    torch.cuda.synchronize()   # the priming calls' kernels finish before the clock starts
                t0 = clock()
                built[name](*args, **kwargs)
                if on_cuda:
                    torch.cuda.synchronize()
                samples[name].append(clock() - t0)
            if r + 1 >= MIN_ROUNDS and clock() >= deadline:
                break
    return samples


def _unavailable(name: str, traced) -> str:
    """Why candidate ``name`` does not apply here ('' when it does)."""
    if name in ("onnxruntime", "openvino"):
        if importlib.util.find_spec(name) is None:
            return f"not built: {name} is not installed"
        device = program_device(traced)
        if device != "cpu":
            return f"not built: the program runs on {device}; the {name} backend runs on the CPU"
    if name == "cuda_graphs":
        device = program_device(traced)
        if not device.startswith("cuda") or not torch.cuda.is_available():
            return f"not built: the program runs on {device}; CUDA graphs need a CUDA program"
    return ""


def _build(name: str, traced):
    """The candidate ``name``: the traced program itself, or ``optimize_for_inference(traced, backend=name)``
    (which is ``protocol.build``: inference.py imports this module, not the other way round)."""
    if name == "traced":
        return traced
    return protocol.build(name, traced)


def _example_inputs(traced, given) -> tuple[tuple, dict]:
    """(args, kwargs) to time on: ``given`` (a tensor, a tuple of arguments or a dict of keyword
    arguments), else the inputs the trace stored (``(args, kwargs)``, per method for
    a module), else synthesized from the recorded input types."""
    if given is not None:
        if isinstance(given, dict):
            return (), dict(given)
        return (given if isinstance(given, tuple) else (given,)), {}
    stored = traced.__dict__.get("example_inputs")
    if isinstance(stored, dict):
        stored = stored.get("forward")
    if isinstance(stored, tuple) and len(stored) == 2 and isinstance(stored[1], dict):
        return tuple(stored[0]), dict(stored[1])
    return _synthesized(traced), {}


def _synthesized(traced) -> tuple:
    """Tensors of the recorded input types, on the recorded devices, for a program saved without its example
    inputs (typed_inputs.py)."""
    graph = traced._method("forward").graph if hasattr(traced, "_method") else traced.graph
    made = None if graph.in_spec is None or graph.in_spec.children[1].num_leaves else inputs_of_types(graph)
    if made is None:
        raise ValueError("optimize_for_inference(backend='auto') needs example_inputs for this program "
                         "(it takes keyword arguments or inputs without a fixed size, and holds no example inputs)")
    return made[0]
