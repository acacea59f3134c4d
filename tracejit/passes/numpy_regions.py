"""Fuse runs of small float32 elementwise / linear ops into one ``tracejit::kernel`` node.

Each op of such a run costs a few microseconds in torch's dispatcher and well under one as a
numpy ufunc on a zero-copy view (kernels/numpy_kernel.py); a linear layer with a constant
weight becomes ``matmul`` + ``add``. The node calls a ``NumpyKernel`` that checks its inputs
every call and runs the same steps as torch ops when they do not fit (not CPU float32, too
large, tracked by autograd), so the answer never depends on the path.

The kernel is an in-memory object: this lowering pass runs after the saved pipeline (passes/pipeline.py,
``IN_MEMORY_PASSES``), its kernels live in the lowered program's table (passes/lowered.py), and a saved
program keeps the graph before it.

A run is a sequence of consecutive supported nodes (constant nodes in between do not break it)
on CPU float32 values; it is fused when it holds at least ``MIN_WEIGHT`` ops' worth of work, its
tensors (constants aside) had at most ``MAX_ELEMENTS`` elements when traced, and at that size its
estimated cost as a kernel is below its cost as torch ops (runtime/elementwise_costs.py: the kernel
saves the dispatcher per op, but pays its entry and a check and view per tensor it reads, and
``clamp``, ``relu`` and ``rsqrt`` cost numpy more per element than torch; an op without a measured
cost leaves the run in torch).

Only steps whose kernel answer is torch's to the bit are fused (``elementwise_costs.BIT_EXACT``:
arithmetic, rounding, clamps, reciprocals; exp, log, tanh, sigmoid, sin, sqrt, ... stay torch ops, since
numpy's float32 loops are 1-4 ulps from torch's and the optimized program must be as exact as torch.jit's
freeze). ``pow`` by a scalar is fused only for the exponents torch computes without pow (2, 3, -1, -2, -0.5:
the kernel computes the same products, bit for bit); ``x ** 2.5`` and ``x ** y`` stay torch ops (np.power
differs from torch in the last bit and takes ~250 ns per negative element).
"""
from __future__ import annotations

import math

import torch

from ..codegen.capture_emit import region_of
from ..ir import Graph, Node, TensorType, Value, iter_values, verify
from ..ops import is_fresh, split_name
from ..kernels.elementwise_costs import BIT_EXACT, SCALAR_POWERS, cost_key, numpy_kernel_ns, torch_ns
from ..kernels.numexpr_groups import EXPR
from ..kernels.numpy_kernel import MAX_ELEMENTS, UNARY, NumpyKernel
from .dce import eliminate_dead_code
from .graph_copy import copy_graph, replace_uses
from .lowered import Lowered

OP = "tracejit::kernel"
CONSTANT = "tracejit::constant"
MIN_WEIGHT = 3                 # the kernel's entry and exit cost about as much as two torch ops
MIN_SHARE = 0.5                # kernels pay in a program only where they hold this share of its compute ops
MAX_WEIGHT_ELEMENTS = 1 << 18  # a linear weight larger than this runs in torch (its threads win)
# numpy's OpenBLAS runs a product of more than 65536 * 4 multiply-adds on its own threads, whatever
# torch.set_num_threads says; on a busy machine that cost 4.6 ms for a [17, 512] x [512, 128] product
# (25 us single-threaded at 262144) and slowed the torch ops after it 2.3x: such a linear stays torch's
BLAS_ONE_THREAD_MACS = 65536 * 4
_SCALAR_BINARY = {"add", "sub", "mul", "div"}
_REVERSED = {"sub": "rsub", "div": None, "pow": "rpow"}


def fuse_numpy_regions(lowered: Lowered) -> Lowered:
    """A lowering pass: a copy of ``lowered``'s graph with each long enough run of supported ops replaced by
    one region node, its kernel appended to the lowered program's table (passes/lowered.py)."""
    out, kernels = copy_graph(lowered.graph), list(lowered.kernels)
    uses = _count_uses(out)
    runs, run = [], []
    for node in out.nodes:
        if node.op == CONSTANT and run:
            run.append(node)
        elif _step_of(out, node) is not None:
            run.append(node)
        else:
            runs.append(run)
            run = []
    runs.append(run)
    fused = 0
    # a frozen constant is a copy only this program holds; unless some node writes in place, it never changes
    writes = any(n.effectful and n.op != "tracejit::guard" for n in out.nodes)
    chosen = [run for run in runs if _chosen([n for n in run if n.op != CONSTANT], out)]
    if not _numpy_dominated(out, chosen):
        return lowered
    for run in chosen:
        ops = [n for n in run if n.op != CONSTANT]
        _fuse(out, kernels, run, uses, frozen_private=not writes, elements=_elements(ops))
        fused += 1
    if fused:
        eliminate_dead_code(out)
        verify(out)
    return Lowered(out, tuple(kernels))


def _chosen(ops: list, graph: Graph) -> bool:
    """Is this run worth a kernel on its own: enough work, small tensors, cheaper as a kernel (cost model)?"""
    return (sum(3 if n.op.startswith("aten::linear") else 1 for n in ops) >= MIN_WEIGHT and _small(ops)
            and _pays(graph, ops))


def _numpy_dominated(graph: Graph, chosen: list) -> bool:
    """Would the kernels hold at least ``MIN_SHARE`` of the program's compute ops (aten ops returning new
    tensors)? Measured in whole programs (bench/pass_time_bisect.py), a kernel among torch ops costs ~3x what
    it costs in a loop of its own: numpy's code and its allocations are cold between torch ops (a linear + mul
    region of Whisper's encoder, 7 us alone, took 21-24 us in the program; torch's ops took ~2x their loop
    time there). Such programs ran slower with their kernels than without (Whisper encoder, Mistral, GPT-2, T5
    at batch 1: by 3-16%, with 1-12 kernels each holding under a tenth of the ops); an MLP whose forward is one
    kernel runs faster."""
    in_runs = sum(1 for run in chosen for n in run if n.op != CONSTANT)
    if not in_runs:
        return False
    compute = sum(1 for n in graph.nodes if n.op.startswith("aten::") and is_fresh(split_name(n.op)[1]))
    return in_runs >= MIN_SHARE * max(compute, in_runs)


def _elements(ops: list) -> int:
    """The largest number of elements of a (non-constant) tensor the run read or wrote when traced."""
    most = 1
    for node in ops:
        for v in list(node.input_values()) + node.outputs:
            shape = getattr(getattr(v, "type", None), "shape", ())
            if v.producer is None or v.producer.op != CONSTANT:
                most = max(most, math.prod(s if isinstance(s, int) and s >= 0 else MAX_ELEMENTS for s in shape))
    return most


def _pays(graph: Graph, ops: list) -> bool:
    """Is the run estimated cheaper as one numpy kernel (ufunc steps; its numexpr programs are only
    chosen where they are cheaper still) than as torch ops, at its traced size? Unknown: no."""
    keys = []
    for node in ops:
        op, operands = _step_of(graph, node)
        keys.append(cost_key(op, operands))
    calls = {k: EXPR[k][1] for k in keys if k in EXPR}
    elements = _elements(ops)
    kernel, torch_ops = numpy_kernel_ns(keys, calls, elements, _inputs(ops)), torch_ns(keys, elements)
    return kernel is not None and torch_ops is not None and kernel < torch_ops


def _inputs(ops: list) -> int:
    """How many tensors from outside the run (constants aside) the run's kernel would read: each costs the
    kernel its checks and a .numpy() view per call (elementwise_costs.INPUT_NS)."""
    inside = {id(v) for node in ops for v in node.outputs}
    outside = {id(v) for node in ops for v in node.input_values()
               if id(v) not in inside and (v.producer is None or v.producer.op != CONSTANT)}
    return len(outside)


def _small(ops: list) -> bool:
    """Were the run's tensors small enough at trace time for the fast path (else it would only add
    its checks to every call)?"""
    for node in ops:
        for v in list(node.input_values()) + node.outputs:
            shape = getattr(getattr(v, "type", None), "shape", ())
            if v.producer is None or v.producer.op != CONSTANT:
                if math.prod(s if isinstance(s, int) and s >= 0 else MAX_ELEMENTS for s in shape) > MAX_ELEMENTS:
                    return False
    return True


def region_nodes(graph: Graph) -> list:
    """The numpy region nodes of ``graph`` (for tests and tools)."""
    return [n for n in graph.nodes if n.op == OP and n.attrs["ops"].startswith("numpy:")]


def _count_uses(graph: Graph) -> dict:
    uses: dict[int, int] = {}
    for node in graph.nodes:
        for v in node.input_values():
            uses[id(v)] = uses.get(id(v), 0) + 1
    for v in iter_values(graph.outputs):
        uses[id(v)] = uses.get(id(v), 0) + 1
    return uses


def _is_f32(v) -> bool:
    t = getattr(v, "type", None)
    return isinstance(t, TensorType) and t.dtype == torch.float32 and t.device == "cpu"


def _scalar(a) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a)


def _const_tensor(graph: Graph, v) -> torch.Tensor | None:
    if isinstance(v, Value) and v.producer is not None and v.producer.op == CONSTANT:
        c = graph.constants[v.producer.attrs["index"]]
        if isinstance(c, torch.Tensor) and c.dtype == torch.float32 and c.device.type == "cpu" \
                and c.layout == torch.strided and not c.is_nested:
            return c
    return None


def _step_of(graph: Graph, node: Node):
    """``(op, operand values / scalars)`` when the node can run in a region, else None."""
    if not node.op.startswith("aten::") or node.effectful or region_of(node) is not None:
        return None
    if len(node.outputs) != 1 or not _is_f32(node.outputs[0]):
        return None
    _, name, overload = split_name(node.op)
    args, kwargs = list(node.args), dict(node.kwargs)
    if name == "clamp" and len(args) <= 3:   # clamp(x, min=None, max=None), by position or keyword
        args += [None] * (3 - len(args))
        for i, key in ((1, "min"), (2, "max")):
            if key in kwargs:
                args[i] = kwargs.pop(key)
    if kwargs or any(isinstance(a, Value) and not _is_f32(a) for a in args):
        return None
    step = _classify(graph, name, overload, args)
    if step is None:
        return None
    op, operands = step
    if not any(isinstance(a, Value) for a in operands):
        return None
    if op not in ("linear", "linear_nobias") and cost_key(op, operands) not in BIT_EXACT:
        return None   # not torch's answer to the bit (elementwise_costs.BIT_EXACT): stays a torch op
    return step


def _classify(graph: Graph, name: str, overload: str, args: list):
    if name in UNARY and name not in ("linear", "linear_nobias") and len(args) == 1:
        return name, args
    if name in _SCALAR_BINARY | {"pow"} and len(args) == 2:
        a, b = args
        if not all(isinstance(x, Value) or _scalar(x) for x in (a, b)):
            return None
        if name == "pow" and isinstance(a, Value) and _scalar(b) and float(b) not in SCALAR_POWERS:
            return None
        if isinstance(a, Value):
            return name, [a, b]
        if name in ("add", "mul"):
            return name, [b, a]
        rev = _REVERSED.get(name)
        return (rev, [b, a]) if rev else None
    if name == "rsub" and len(args) == 2 and isinstance(args[0], Value) and _scalar(args[1]):
        return "rsub", args
    if name in ("clamp_min", "clamp_max") and len(args) == 2 and _scalar(args[1]):
        return name, args
    if name == "clamp" and len(args) == 3:
        lo, hi = args[1], args[2]
        if lo is not None and hi is not None and _scalar(lo) and _scalar(hi):
            return "clamp", args
        if lo is not None and hi is None and _scalar(lo):
            return "clamp_min", args[:2]
        if lo is None and hi is not None and _scalar(hi):
            return "clamp_max", [args[0], hi]
        return None
    if name == "linear" and len(args) in (2, 3):
        w = _const_tensor(graph, args[1])
        b = _const_tensor(graph, args[2]) if len(args) == 3 and args[2] is not None else None
        if w is None or w.dim() != 2 or w.numel() > MAX_WEIGHT_ELEMENTS:
            return None
        shape = getattr(getattr(args[0], "type", None), "shape", None)
        if shape is None or not all(isinstance(d, int) and d >= 0 for d in shape) \
                or math.prod(shape) * w.shape[0] > BLAS_ONE_THREAD_MACS:
            return None
        if len(args) == 3 and args[2] is not None:
            return ("linear", args) if b is not None and b.dim() == 1 else None
        return "linear_nobias", args[:2]
    return None


def _fuse(graph: Graph, kernels: list, run: list, uses: dict, frozen_private: bool, elements: int) -> None:
    in_run = {id(n) for n in run}
    produced: dict[int, int] = {}     # id(Value) -> step index
    inputs: list = []
    consts: list = []
    steps: list = []
    step_values: list = []
    for node in run:
        if node.op == CONSTANT:
            continue
        op, operands = _step_of(graph, node)
        encoded = [_operand(graph, a, produced, inputs, consts) for a in operands]
        first = operands[0]
        inplace = (op in UNARY or not any(isinstance(a, Value) for a in operands[1:])) and op not in (
            "linear", "linear_nobias") and isinstance(first, Value) and id(first) in produced \
            and uses.get(id(first), 0) == 1
        produced[id(node.outputs[0])] = len(steps)
        steps.append((op, encoded, inplace))
        step_values.append(node.outputs[0])
    inside = {id(v): 0 for v in step_values}
    for node in run:
        for v in node.input_values():
            if id(v) in inside:
                inside[id(v)] += 1
    outputs = [j for j, v in enumerate(step_values) if uses.get(id(v), 0) > inside[id(v)]]
    private = [i for i, c in enumerate(consts) if frozen_private and "frozen_from" in c.producer.attrs]
    kernel = NumpyKernel(steps, len(inputs), [graph.constants[c.producer.attrs["index"]] for c in consts],
                         outputs, label=f"numpy_region_{len(steps)}ops", private=private, elements=elements)
    first = next(n for n in run if n.op != CONSTANT)
    region = Node(OP, "", args=tuple(inputs), attrs={"index": len(kernels), "ops": "numpy:" + kernel.describe()},
                  source=first.source, scope=first.scope)
    kernels.append(kernel.function)
    if len(outputs) > 1:
        region.attrs["unpack"] = True
    region.outputs = [Value(step_values[j].type, region, i, None, step_values[j].dynamic)
                      for i, j in enumerate(outputs)]
    last = max(i for i, n in enumerate(graph.nodes) if id(n) in in_run)
    nodes = graph.nodes[:last + 1] + [region] + graph.nodes[last + 1:]
    graph.nodes = [n for n in nodes if not (id(n) in in_run and n.op != CONSTANT)]
    replace_uses(graph, {id(step_values[j]): region.outputs[i] for i, j in enumerate(outputs)})


def _operand(graph: Graph, a, produced: dict, inputs: list, consts: list):
    if not isinstance(a, Value):
        return ("s", a)
    if id(a) in produced:
        return ("v", produced[id(a)])
    if _const_tensor(graph, a) is not None:
        for i, c in enumerate(consts):
            if c is a:
                return ("k", i)
        consts.append(a)
        return ("k", len(consts) - 1)
    for i, x in enumerate(inputs):
        if x is a:
            return ("in", i)
    inputs.append(a)
    return ("in", len(inputs) - 1)
