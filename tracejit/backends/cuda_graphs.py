"""The CUDA-graph backend: ``optimize_for_inference(traced, backend="cuda_graphs")``.

The optimized program (the torch backend's: frozen, inference passes, without the CPU-only kernels
that no graph can hold) is captured in one CUDA graph per call signature, and a call whose signature was seen
replays it: one launch per call instead of one per op, which is what a GPU at batch 1 waits on.

* **Signature** (``call_key``): the argument structure, each tensor's shape, dtype and device,
  each other argument's value, the module's training flag, grad / inference mode, and the answer
  of every global-state read the program guards (``torch.is_grad_enabled()`` ...), asked per call.
  A program is captured only when every guard it holds (every specialization's) is decided by that
  signature: size, rank, length, dtype, device, training and state guards, and the guards on Python state
  (kind ``global``: a config object's attribute, a module global), whose answers, per specialization, are part of
  the signature (backends/state_guards.py: checked before every replay; where no specialization's hold, the call
  runs the program, whose guards decide), and the metadata guards on what a plain dense tensor is (``layout``,
  ``is_nested``, ``is_quantized``, ``is_conj`` ...: torchvision's ``box_area``, PyTorch's attention), which every
  tensor of a call whose inputs are plain dense tensors (the signature requires it) has as it had at the capture.
  A value guard (``.item()``,
  ``bool(t)``: a device sync, and a branch a graph cannot take), another metadata guard (strides,
  ``is_contiguous``: the graph runs on contiguous copies) or a random op (a replay would not draw as
  eager does) makes every call run the optimized program instead, with one TracerWarning at build
  (default-deny: a guard kind nobody listed here is not captured).
* **Guards before replay**: the signature is computed and looked up before anything runs; a call
  whose signature differs from every captured one captures anew (or runs the program, whose guards
  raise GuardError as usual), so a replay never answers for inputs its guards did not accept.
* **Static buffers**: each entry holds copies of the inputs (``dtype=`` casts floating ones) and the
  outputs the capture produced; a replay copies the call's tensors in, replays, and clones the outputs
  out, unless ``reuse_outputs=True`` (then the next call with that signature overwrites them).
* **Cache**: at most ``cache_size`` signatures (least recently used dropped with its graph and memory).
* **Fallback**: a capture that fails (an op that syncs, a CPU tensor in the program) warns once per
  signature and that signature runs the optimized program from then on. So does a program that wrote
  one of its inputs in place (a replay would write only the static copy), a call under autocast, with
  an input that requires grad while grad is on, on a device the capturer does not take, or after a
  captured tensor changed (backends/fallback.py): never a wrong answer.
* **Threads**: one lock per program around capture and copy-in / replay / copy-out (the static
  buffers are shared); calls that run the program take no lock.

The capture is behind a seam (``capturer=``): ``CudaGraphCapture`` (``torch.cuda.CUDAGraph``,
warm-up on a side stream, then capture on it) by default; tests drive the cache, guards, fallback,
cloning and threads on the CPU with a stand-in that has the same ``accepts`` / ``capture`` /
``replay``. docs/CUDA.md: what it costs and its limits.
"""
from __future__ import annotations

import collections
import copy
import threading
import warnings

import torch
from torch import nn

from ..support.module_hooks import any_registered  # a global module hook: the program decides
from .. import pytree
from ..errors import GuardError, TracerWarning
from .torch_program import optimized
from ..passes.pipeline import program_device
from ..ir import nodes_with_callees, state_tests
from ..ops import aten
from ..runtime import specialize
from .fallback import autocast_on, captured_changed, nonfinite_input
from .state_guards import state_check
from ..export.guards import ONNX_FACTS as DENSE_TENSOR_FACTS   # what every tensor of an ONNX model (or plain call) is

NAME = "cuda_graphs"
DEFAULT_CACHE_SIZE = 8
KEYED_GUARDS = frozenset({"size", "rank", "length", "dtype", "device", "training"})   # decided by call_key
PYTHON_STATE_GUARDS = frozenset({"global"})   # checked per call by state_checks, their answers in the key
# a meta guard on these calls is decided by the signature, whose tensors are all plain dense ones (_plain)
DENSE_FACTS = frozenset(DENSE_TENSOR_FACTS)
LOWER_PRECISION = (torch.bfloat16, torch.float16)
_UNCAPTURED = object()   # a signature whose capture failed: it runs the program


class CaptureError(RuntimeError):
    """The CUDA graph capture itself failed (not the program: its own errors are raised as they are)."""


class CudaGraphCapture:
    """One ``torch.cuda.CUDAGraph``: ``capture(fn)`` warms ``fn`` up on a side stream (torch's rule: the
    lazy initialisations of cuBLAS / cuDNN must not happen mid-capture), captures one call on that same
    stream and returns its outputs (the static output buffers); ``replay()`` reruns the captured work."""

    WARMUP = 3

    @staticmethod
    def accepts(device: torch.device) -> bool:
        return device.type == "cuda"

    def __init__(self, device: torch.device):
        self.device = device
        self.graph = None

    def capture(self, fn):
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(self.WARMUP):
                fn()   # the program's own errors (GuardError, a shape error) are raised as they are
        graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: only this thread's unsafe calls fail the capture, not another thread's work
            with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                outputs = fn()
        except Exception as e:  # noqa: BLE001  (any failure of the capture: the caller falls back)
            raise CaptureError(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
        torch.cuda.current_stream(self.device).wait_stream(stream)
        self.graph = graph
        return outputs

    def replay(self) -> None:
        self.graph.replay()


class _Entry:
    """One captured signature: its capturer, static input buffers (one per input leaf) and outputs (the
    static output buffers), flattened once (``out_leaves``, ``out_spec``) for the clones of every call."""

    __slots__ = ("capturer", "inputs", "outputs", "out_leaves", "out_spec")

    def __init__(self, capturer, inputs: list, outputs):
        self.capturer, self.inputs, self.outputs = capturer, inputs, outputs
        self.out_leaves, self.out_spec = pytree.flatten(outputs)

    def cloned(self):
        """The outputs with each tensor cloned out of the static buffers (one clone per distinct tensor)."""
        if self.out_spec.kind == pytree.LEAF:
            out = self.out_leaves[0]
            return out.clone() if isinstance(out, torch.Tensor) else out
        memo: dict = {}
        leaves = [memo.setdefault(id(t), t.clone()) if isinstance(t, torch.Tensor) else t for t in self.out_leaves]
        return pytree.unflatten(self.out_spec, leaves)


class CudaGraphProgram:
    """The optimized program, replayed from one CUDA graph per call signature (module docstring).

    ``program``: the optimized program every call that does not replay runs; ``not_captured``: why no
    call replays ('' when calls may); ``stats``: counts of captures, replays, program runs and failed
    captures; ``signatures``: how many graphs the cache holds."""

    backend = NAME

    def __init__(self, program, *, cache_size: int = DEFAULT_CACHE_SIZE, reuse_outputs: bool = False,
                 dtype=None, capturer=CudaGraphCapture):
        self.program = program
        self.cache_size, self.reuse_outputs, self.dtype, self.capturer = cache_size, reuse_outputs, dtype, capturer
        self._spec_set = specialize.sets_of(program).get("forward")
        self._writes_input, self._generation = "", 0
        self._read_guards()
        self._compiled = program.__dict__.get("forward") or program.__dict__.get("_fn")   # fn.finite_inputs
        self._entries: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        self.stats = {"captures": 0, "replays": 0, "program_runs": 0, "failed_captures": 0}
        if self.not_captured:
            warnings.warn(f"optimize_for_inference(backend='cuda_graphs'): {self.not_captured}; every call runs "
                          "the optimized program without a CUDA graph", TracerWarning, stacklevel=3)

    def _read_guards(self) -> None:
        """What the specializations' guards decide (``not_captured``, the state reads and checks of the signature),
        read again whenever the program's set of specializations changes (``_fresh``)."""
        program = self.program
        seen = self._spec_set.entries if self._spec_set is not None else None
        not_captured = why_not_captured(program) or self._writes_input
        checks = state_checks(program) if not not_captured else ()
        self._generation += 1
        # one tuple, published whole: a call reads the generation, reads and checks of one reading (call_key)
        self._keyed = (self._generation, seen, state_reads(program), checks)
        self.not_captured = not_captured

    def _fresh(self) -> None:
        """A specialization added or dropped since the guards were read: read them again and drop every graph
        (their signatures held the old specializations' answers)."""
        with self._lock:
            if self._spec_set.entries is not self._keyed[1]:
                self._read_guards()
                self._entries.clear()

    @property
    def signatures(self) -> int:
        return sum(1 for e in self._entries.values() if e is not _UNCAPTURED)

    def __call__(self, *args, **kwargs):
        if self._spec_set is not None and self._spec_set.entries is not self._keyed[1]:
            self._fresh()
        if self.not_captured or autocast_on() or any_registered() or captured_changed(self.program) \
                or nonfinite_input(self._compiled, args, kwargs):
            return self._run(args, kwargs)
        if not kwargs and all(type(a) is torch.Tensor for a in args):   # the common call: no flatten
            leaves, spec = args, ("tensors", len(args))
        else:
            leaves, spec = pytree.flatten((args, kwargs))
        key = self.call_key(leaves, spec)
        if key is None:
            return self._run(args, kwargs)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._capture(key, leaves, spec)
            else:
                self._entries.move_to_end(key)
            if entry is not _UNCAPTURED:
                for static, leaf in zip(entry.inputs, leaves):
                    if isinstance(static, torch.Tensor):
                        static.copy_(leaf)
                entry.capturer.replay()
                self.stats["replays"] += 1
                return entry.outputs if self.reuse_outputs else entry.cloned()
        return self._run(args, kwargs)

    def call_key(self, leaves, spec):
        """The call's signature (module docstring), or None when this call must run the program."""
        generation, _, reads, checks = self._keyed
        grad = torch.is_grad_enabled()
        parts = [generation, spec, grad, torch.is_inference_mode_enabled(), getattr(self.program, "training", None)]
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                if (grad and leaf.requires_grad) or not self.capturer.accepts(leaf.device) \
                        or type(leaf) not in (torch.Tensor, nn.Parameter) or not _plain(leaf):
                    return None
                parts.append((tuple(leaf.shape), leaf.dtype, leaf.device))
            else:
                parts.append((type(leaf), leaf))
        parts.extend(read() for read in reads)
        if checks:
            held = tuple(_holds(check) for check in checks)
            if not any(held):
                return None   # no specialization's Python-state guards hold: the program's guards decide
            parts.append(held)
        key = tuple(parts)
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def _capture(self, key, leaves, spec):
        """Capture the program on static copies of ``leaves`` (called under the lock)."""
        if self.not_captured or key[0] != self._keyed[0]:
            return _UNCAPTURED   # the guards were read again after this call's key (_fresh): it runs the program
        device = next((leaf.device for leaf in leaves if isinstance(leaf, torch.Tensor)), None)
        if device is None:
            return _UNCAPTURED   # nothing on a device: nothing to launch
        with torch.inference_mode(False):   # static buffers are written by every later call, in any mode
            inputs = [self._static(leaf) for leaf in leaves]
        versions = [t._version for t in inputs if isinstance(t, torch.Tensor)]
        args, kwargs = pytree.unflatten(spec, inputs) if isinstance(spec, pytree.Spec) else (tuple(inputs), {})
        capturer = self.capturer(device)
        try:
            with torch.no_grad():   # no input requires grad (call_key); the optimized program holds constants
                outputs = capturer.capture(lambda: self.program(*args, **kwargs))
        except CaptureError as e:
            self.stats["failed_captures"] += 1
            warnings.warn(f"optimize_for_inference(backend='cuda_graphs'): the CUDA graph capture failed ({e}); "
                          "calls with these input shapes run the optimized program", TracerWarning, stacklevel=3)
            return self._remember(key, _UNCAPTURED)
        if versions != [t._version for t in inputs if isinstance(t, torch.Tensor)]:
            self._writes_input = "the program writes one of its inputs in place (a replay would write only a copy)"
            self.not_captured = self._writes_input
            warnings.warn(f"optimize_for_inference(backend='cuda_graphs'): {self.not_captured}; every call runs "
                          "the optimized program without a CUDA graph", TracerWarning, stacklevel=3)
            return _UNCAPTURED
        self.stats["captures"] += 1
        return self._remember(key, _Entry(capturer, inputs, outputs))

    def _remember(self, key, entry):
        self._entries[key] = entry
        while len(self._entries) > self.cache_size:
            self._entries.popitem(last=False)   # its graph and static memory go with it
        return entry

    def _static(self, leaf):
        if not isinstance(leaf, torch.Tensor):
            return leaf
        dtype = self.dtype if self.dtype is not None and leaf.is_floating_point() else leaf.dtype
        return torch.empty(leaf.shape, dtype=dtype, device=leaf.device).copy_(leaf)

    def _run(self, args, kwargs):
        self.stats["program_runs"] += 1
        if self.dtype is not None:
            args, kwargs = pytree.unflatten(*_swap(pytree.flatten((args, kwargs)), self.dtype))
        return self.program(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<CudaGraphProgram {self.signatures} graph(s) of {self.program!r}>"


def _swap(flat, dtype):
    leaves, spec = flat
    return spec, [t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in leaves]


def _graphs(program) -> list:
    sets = specialize.sets_of(program)
    if "forward" in sets:
        s = sets["forward"]
        specs = [s.first, *s.extra()]
        return [getattr(spec.fn, "run_graph", spec.graph) for spec in specs]
    fn = program.__dict__.get("_fn") or program.__dict__.get("forward")
    return [getattr(fn, "run_graph", fn.graph)] if fn is not None else []


def _guards(program) -> list:
    return [n for g in _graphs(program) for n in specialize.required_guards(g)]


def why_not_captured(program) -> str:
    """Why no call of ``program`` may replay a graph ('' when its calls may): a guard whose answer the
    call signature does not decide, or a random op (module docstring)."""
    for node in _guards(program):
        kind = node.attrs.get("kind")
        if kind not in KEYED_GUARDS and kind not in PYTHON_STATE_GUARDS \
                and not (kind == "meta" and node.attrs.get("call") in DENSE_FACTS) \
                and not (kind == "state" and state_tests.is_state_test(node.attrs.get("test"))):
            return (f"a {kind} guard ({node.attrs.get('what') or node.attrs.get('test')}, at "
                    f"{node.source or 'an unknown line'}) is not decided by the input shapes")
    for graph in _graphs(program):
        for node in nodes_with_callees(graph):
            if node.op.startswith("aten::") and (node.attrs.get("nondeterministic")
                                                 or aten.draws_random(node.name, node.args, node.kwargs)):
                return f"{node.op} draws random numbers (at {node.source or 'an unknown line'})"
    return ""


def state_checks(program) -> tuple:
    """One compiled check of Python-state guards and of the settings held beside the graph (backends/state_guards.py)
    per specialization, in the order of ``_graphs`` (None for one that holds neither); empty where none does."""
    graphs = _graphs(program)
    if not any(n.attrs.get("kind") in PYTHON_STATE_GUARDS for g in graphs for n in specialize.required_guards(g)) \
            and not any(getattr(g, "memory_checks", None) is not None for g in graphs):
        return ()
    return tuple(state_check(graph, "cuda_graphs_state_guards", "forward") for graph in graphs)


def _plain(t: torch.Tensor) -> bool:
    """Is ``t`` a plain dense tensor (strided, not nested, quantized, conjugated or negated)?"""
    return t.layout is torch.strided and not (t.is_nested or t.is_quantized or t.is_conj() or t.is_neg())


def _holds(check) -> bool:
    if check is None:
        return True
    try:
        check(None)
    except GuardError:
        return False
    return True


def state_reads(program) -> tuple:
    """One callable per global-state read the program guards, asked per call (part of the signature)."""
    reads = {}
    for node in _guards(program):
        parsed = state_tests.parse(node.attrs.get("test")) if node.attrs.get("kind") == "state" else None
        if parsed is not None:
            name, device, _ = parsed
            fn = getattr(torch, name)
            reads[(name, device)] = (lambda fn=fn, device=device: fn(device)) if device else fn
        elif node.attrs.get("kind") == "state" and state_tests.parse_backends(node.attrs.get("test")) is not None:
            reads[node.attrs["test"]] = state_tests.backends_read(node.attrs["test"])   # a torch.backends flag
    return tuple(reads.values())


def build(traced, *, cache_size: int = DEFAULT_CACHE_SIZE, reuse_outputs: bool = False, dtype=None,
          capturer=CudaGraphCapture) -> CudaGraphProgram:
    """``optimize_for_inference(traced)``'s program replayed from CUDA graphs: ``cache_size`` signatures
    at most, outputs cloned unless ``reuse_outputs``, ``dtype`` (bfloat16 / float16, opt-in) the precision
    the program and its floating inputs are cast to, ``capturer`` the capture seam (module docstring)."""
    if not isinstance(cache_size, int) or isinstance(cache_size, bool) or cache_size < 1:
        raise ValueError(f"optimize_for_inference(backend='cuda_graphs'): cache_size must be an int >= 1; "
                         f"got {cache_size!r}")
    if dtype is not None and dtype not in LOWER_PRECISION:
        raise ValueError(f"optimize_for_inference(backend='cuda_graphs'): dtype must be None, torch.bfloat16 or "
                         f"torch.float16; got {dtype!r}")
    if not isinstance(reuse_outputs, bool):
        raise TypeError(f"optimize_for_inference(backend='cuda_graphs'): reuse_outputs must be a bool; "
                        f"got {reuse_outputs!r}")
    if dtype is not None and isinstance(traced, nn.Module):
        traced = copy.deepcopy(traced).to(dtype)   # the caller's program is never changed
    # a CUDA program gets its lowering passes (cuDNN's fused conv + relu: CUDA_IN_MEMORY_PASSES); any other keeps
    # torch's ops: the CPU-only kernels (numpy, oneDNN) can be in no CUDA graph, and on the CPU (a test's
    # capturer) the program stays torch ops only
    on_cuda = program_device(traced).startswith("cuda")
    return CudaGraphProgram(optimized(traced, in_memory=on_cuda), cache_size=cache_size, reuse_outputs=reuse_outputs,
                            dtype=dtype, capturer=capturer)
