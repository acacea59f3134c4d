"""Which CUDA lowering passes pay for this program? Timed on the whole program where it is built (issue #25 item 1).

The CUDA lowering passes (``pipeline.CUDA_IN_MEMORY_PASSES``: cuDNN's conv + add + relu, sibling linears as one
batched GEMM, a linear as ``x @ Wt`` + bias) were each measured at one size: ResNet-50 at 224 px, BERT-base at 128
rows (H200, fp32). At the bench zoo's small sizes a call is bound by its kernel launches, not by the GPU's work, and
``x @ Wt`` + bias is two launches where ``F.linear`` is one: on an H200 the default backend (no CUDA graphs) read
1.01-1.11x the traced program's time on 5 of 11 zoo models at batch 1 (ConvNeXt-T 1.11, ViT 1.05, DeiT 1.05,
Whisper 1.04, BERT 1.01) and ViT 1.03x eager's (bench/RESULTS.md, thirty-fifth pass).

So on CUDA the program is lowered several ways: with every CUDA pass, without each pass that changed the program
(one at a time), and with none (torch's ops). Each way is called on inputs of the traced types
(typed_inputs.py), each call waited for (``torch.cuda.synchronize``: launches are asynchronous), in interleaved
rounds under paired_timing's lock (``ROUNDS`` samples each, the minimum counts) within ``BUDGET_S``. The fastest is
kept where it takes at most ``MARGIN`` of the time with none; otherwise none.

The ways without one pass are built only where the device has room for twice what the kernels of every pass
allocated (``new_bytes``: sibling linears hold their weights concatenated; a cuDNN conv and an ``x @ Wt`` linear
hold the frozen weights themselves): a model that fits its device with one lowering is never put out of memory by
the timing; where there is no such room only every pass and none are timed.

Default-deny: torch's ops (no CUDA kernel) where
* an input has no recorded fixed size or a dtype typed_inputs cannot make, the graph draws random numbers (calling
  it would advance the caller's generator) or writes in place into a constant or a preserved buffer (calling it
  would change the program's state: ``passes.written.writes_state``);
* a way fails on those inputs (an integer input whose values a guard reads fails it on zeros);
* or the budget runs out.

``MEASURE = False`` keeps every pass untimed: the tests that pin a pass's rewrite set it (their verdicts would move
with the machine's load). ``LAST`` holds the last choice's report (a line per way timed), for bench scripts.

A CPU machine can run the choice on any passes and device (``sync`` is the device's wait, none on the CPU):

>>> import torch, tracejit
>>> from types import MethodType
>>> from tracejit.backends import cuda_pass_choice
>>> from tracejit.passes.pipeline import IN_MEMORY_PASSES
>>> from tracejit.runtime.method_compiler import compile_method
>>> net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()).eval()
>>> frozen = tracejit.freeze(tracejit.trace(net, torch.randn(2, 64)))
>>> def call(lowered):
...     return MethodType(compile_method(lowered.graph, "forward", "mlp", True, kernels=lowered.kernels), frozen)
>>> chosen = lower_with_measured_passes(frozen.forward.graph, IN_MEMORY_PASSES, call, sync=None)
>>> cuda_pass_choice.LAST.split(":")[0] in ("kept every pass", "kept none")
True
"""
from __future__ import annotations

import time
from typing import Callable, Optional

import torch

from ..ops import draws_random
from ..passes.lowered import Lowered
from ..passes.paired_timing import LOCK, interleaved_all
from ..passes.pipeline import lower
from ..passes.written import writes_state
from .region_choice import kernels_of
from .typed_inputs import inputs_of_types

MEASURE = True
BUDGET_S = 3.0   # timing every way stops here: torch's ops stay
MARGIN = 0.97    # a way with kernels is kept only at or under this share of the time with none
ROUNDS = 7       # interleaved samples of each way (the minimum counts); a GPU call at batch 1 lasts 0.2-5 ms
LAST = ""


def lower_with_cuda_timing(graph, passes, make_call: Callable[[Lowered], Callable]) -> Lowered:
    """``lower_with_measured_passes`` for a program on CUDA: each call waited for with ``torch.cuda.synchronize`` on
    the program's device, the room asked of that device."""
    device = _cuda_device(graph)
    return lower_with_measured_passes(graph, passes, make_call, sync=lambda: torch.cuda.synchronize(device),
                                      room=lambda: torch.cuda.mem_get_info(device)[0])


def _cuda_device(graph) -> torch.device:
    """The CUDA device ``graph`` runs on (its first CUDA constant's, else its first CUDA input's): the one to wait
    for and to ask for room (``torch.cuda.synchronize()`` alone waits for the current device only)."""
    held = next((c.device for c in graph.constants if isinstance(c, torch.Tensor) and c.is_cuda), None)
    if held is not None:
        return held
    typed = next((v.type.device for v in graph.inputs if str(getattr(v.type, "device", "")).startswith("cuda")), None)
    return torch.device(typed or "cuda")


def new_bytes(lowered: Lowered, graph) -> int:
    """Bytes of the tensors ``lowered``'s kernels hold (their ``weight`` and ``bias``) that are not storage of
    ``graph``'s constants: what the lowering allocated (sibling linears' concatenated weights), counted once each."""
    held = {c.untyped_storage().data_ptr() for c in graph.constants if isinstance(c, torch.Tensor)}
    total = 0
    for kernel in lowered.kernels:
        for t in (getattr(kernel, "weight", None), getattr(kernel, "bias", None)):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in held:
                held.add(t.untyped_storage().data_ptr())
                total += t.untyped_storage().nbytes()
    return total


def lower_with_measured_passes(graph, passes, make_call: Callable[[Lowered], Callable],
                               sync: Optional[Callable[[], None]], room: Optional[Callable[[], int]] = None) -> Lowered:
    """The fastest of ``graph`` lowered with every one of ``passes``, without each that changed it, and with none,
    timed whole (module docstring). ``make_call(lowered)``: a callable running that lowered program on the graph's
    arguments; ``sync``: waits for the device after each call (None: nothing to wait for); ``room``: the device's
    free bytes (None: not asked), which must hold twice what the kernels of every pass added before the ways
    without one pass are built."""
    global LAST
    every = lower(graph, passes)
    if not MEASURE:
        LAST = "every pass: timing off (MEASURE = False)"
        return every
    plain = lower(graph, ())
    if kernels_of(every) == kernels_of(plain):
        LAST = "no pass changed the program"
        return every
    inputs = inputs_of_types(graph)
    if inputs is None or any(draws_random(n.op, n.args, n.kwargs) for n in graph.nodes) or writes_state(graph):
        LAST = "none: the program cannot be timed on inputs of its types (torch's ops)"
        return plain
    ways = {"every pass": every}
    if room is None or 2 * new_bytes(every, graph) <= room():
        for name, _ in passes:
            without = lower(graph, tuple(p for p in passes if p[0] != name))
            if all(kernels_of(without) != kernels_of(w) for w in list(ways.values()) + [plain]):
                ways[f"without {name}"] = without
    ways["none"] = plain
    times = _timed(ways, make_call, inputs, sync)
    if times is None:
        LAST = "none: not timed within the budget, or a way failed on inputs of its types (torch's ops)"
        return plain
    best = min(times, key=times.get)
    if times[best] > MARGIN * times["none"]:
        best = "none"
    LAST = f"kept {best}: " + ", ".join(f"{name} {t * 1e6:.1f} us" for name, t in times.items())
    return ways[best]


def _timed(ways: dict, make_call, inputs, sync) -> Optional[dict]:
    """Seconds per call of each way on ``inputs`` (``(args, kwargs)``), or None (one failed, or out of budget)."""
    args, kwargs = inputs
    deadline = time.perf_counter() + BUDGET_S
    with LOCK, torch.no_grad():
        try:
            calls = [make_call(lowered) for lowered in ways.values()]
            fns = [_waited(call, args, kwargs, sync) for call in calls]
            times = interleaved_all(fns, deadline, ROUNDS)
        except Exception:  # noqa: BLE001  (a way that fails on these inputs: none is kept)
            return None
    return None if times is None else dict(zip(ways, times))


def _waited(call, args, kwargs, sync):
    if sync is None:
        return lambda: call(*args, **kwargs)

    def run():
        call(*args, **kwargs)
        sync()
    return run
