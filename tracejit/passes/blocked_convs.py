"""A conv net that cannot run channels-last runs its convs in oneDNN's blocked layout, region by region.

passes/conv_layout.py makes a conv net channels-last where every op reading a feature map ignores strides.
Where one does not (FCN's ``interpolate``, a ``view`` of a feature map), torch's conv2d runs NCHW: oneDNN
reorders each input into its blocked layout and each result back, on every conv. This pass keeps the feature
maps blocked between convs instead (kernels/onednn_blocked.py), as torch.jit's ``optimize_for_inference``
does: FCN-ResNet50 at batch 8, 0.97x -> 0.90x eager's time (bench_zoo, 1 thread; torch.jit's freeze 0.89x).

A region grows in graph order from each conv with frozen float32 weights (``_conv_spec``) through the ops
oneDNN runs on blocked tensors (``BLOCKED``: relu, add, max pool, eval dropout) that read a region value.
Its entries go through ``ToBlocked`` once, before their first region reader; a region tensor read outside
the region goes through ``ToDense`` once, before its first such reader (a graph output: at the end), except for
rank guards and ``size`` / ``dim`` reads, which read a blocked tensor's metadata as they are. A region of fewer than ``MIN_CONVS``
convs is left as it was: the two conversions cost more than one conv saves (every conv converted on its own
ran 1.02x eager's time on FCN); the count is per connected part of the regions. A part that passes those rules
runs blocked only where its convs, timed both ways at their traced sizes on the machine that lowers the program, are
faster blocked with its conversions counted (passes/blocked_timing.py: on one CPU the regions paid at batch 1, on
another they made dla34 1.27x its traced program's time). Those per-region sums can mislead in a whole program
(GoogLeNet at batch 8: no region kept, 0.91x eager's time; with them 0.73x): where the kept regions differ from the
structural ones (``every_blocked_conv_region``), backends/region_choice.py times the two programs whole.

A layout-free graph (conv_layout.py made its convs channels-last) gets the same regions, timed against its
channels-last convs: on this machine's AVX-512 core oneDNN's channels-last convs win at batch 1 (ResNet-50: 0.74x
eager's time against 1.22x blocked) and its blocked ones at batch 8 (ResNet-50 0.78x against 0.84x, ResNet-18
0.80x against 0.89x; torch.jit's freeze, which runs them blocked, 0.81x and 0.75x), and the blocked ones are nearer
the float64 answer (FCN's 3x3 convs: 2-7x, conv by conv).

Default-deny, the graph is left as it was where:
  - it has no conv, or it is layout-free and the timing is off (``blocked_timing.MEASURE``: a region nobody
    measured keeps the channels-last convs);
  - a node outside the regions writes memory a region value or entry may share (``ops.is_fresh`` says which
    results are new memory; any other may alias its inputs): the write would miss a conversion's copy;
  - a reader outside a region reads a region value that a region op writes later (its dense copy would miss
    the write a view of eager's tensor sees).
The kernels are in-memory objects (``IN_MEMORY_PASSES``): a saved program keeps the graph before this pass.
"""
from __future__ import annotations

import statistics

from ..ir import Graph, Node, Value, iter_values, map_values
from ..kernels.onednn_blocked import BlockedAdd, BlockedConv, BlockedOp, ToBlocked, ToDense
from ..kernels.onednn_conv import available
from ..ops import is_fresh
from ..ops.convs import CONV2D as CONVS
from ..ops.names import GUARD, KERNEL
from .conv_kernels import MIN_DENSE_MACS, _conv_spec, _f32_4d, multiply_adds
from .conv_layout import layout_free
from .blocked_timing import region_pays
from . import blocked_timing
from .graph_copy import copy_graph
from .kernel_chains import finish
from .lowered import Lowered

MIN_CONVS = 3   # a region with fewer convs stays torch's conv2d
MAX_CONVERSIONS_PER_CONV = 1.0   # a region converting more often stays torch's (bench/RESULTS.md, eighteenth pass)

# what oneDNN runs on blocked tensors (torch's ops dispatch them to mkldnn_*): how each result relates to its
# first argument ("inplace": writes and returns it; "alias": returns it; "fresh": new memory). An
# implementation table of this kernel family (tests/ops/test_no_op_tables.py).
BLOCKED = {
    "aten::relu.default": "fresh",
    "aten::relu_.default": "inplace",
    "aten::max_pool2d.default": "fresh",
    "aten::dropout.default": "alias",       # train=False only: the input itself
    "aten::add.Tensor": "fresh",
    "aten::add_.Tensor": "inplace",
}
ADDS = {"aten::add.Tensor": False, "aten::add_.Tensor": True}   # add op -> in place (an implementation table)
# the reads that take a blocked tensor as they take a plain one, and what they read (an implementation table)
METADATA_READS = {"aten::size.int": "one size", "aten::dim.default": "the rank"}


def blocked_conv_regions(lowered: Lowered, timed: bool = True) -> Lowered:
    """A lowering pass: a copy of ``lowered``'s graph whose conv regions run blocked (see the module doc);
    ``timed=False``: every region the structural rules keep, untimed (``every_blocked_conv_region``)."""
    graph = lowered.graph
    if not available() or not any(n.op in CONVS for n in graph.nodes):
        return lowered
    channels_last = layout_free(graph)   # its convs run channels-last unless a region times faster blocked
    if channels_last and timed and not blocked_timing.MEASURE:   # (read at the call: tests turn the timing off)
        return lowered
    out = copy_graph(graph)
    region = _large_enough(out, _region(out), channels_last, timed)
    if not region or not _safe(out, region):
        return lowered
    kernels = list(lowered.kernels)
    _rewrite(out, region, kernels)
    return Lowered(finish(out, True), tuple(kernels))


def _region(graph: Graph) -> set:
    """ids of the nodes that run blocked: convs with frozen weights, and the ``BLOCKED`` ops reading their
    results (an in-place one only on a region value)."""
    region: set[int] = set()
    made: set[int] = set()   # ids of region values
    for node in graph.nodes:
        if node.op in CONVS:
            takes = _conv_spec(graph, node) is not None
        elif node.op in BLOCKED and node.outputs and node.outputs[0] is not None and _f32_4d(node.outputs[0]):
            takes = _fits(node) and (id(node.args[0]) in made if BLOCKED[node.op] == "inplace"
                                     else any(id(v) in made for v in node.input_values()))
        else:
            takes = False
        if takes:
            region.add(id(node))
            made.add(id(node.outputs[0]))
    return region


def every_blocked_conv_region(lowered: Lowered) -> Lowered:
    """``blocked_conv_regions`` keeping every region its structural rules keep, none timed: the other program
    backends/region_choice.py times whole against the one the region timing chose."""
    return blocked_conv_regions(lowered, timed=False)


def _large_enough(graph: Graph, region: set, channels_last: bool = False, timed: bool = True) -> set:
    """The nodes of ``region`` whose connected part (nodes joined by the region values they read) holds at least
    ``MIN_CONVS`` convs, at most ``MAX_CONVERSIONS_PER_CONV`` conversions per conv (each entry, and each outside
    reader of a region value: an upper bound on the copies ``_rewrite`` makes, the count the bound was measured
    with), a median conv of at least ``MIN_DENSE_MACS`` multiply-adds at its traced size, and timed faster blocked
    than as the convs it replaces (channels-last ones in a layout-free graph)."""
    parent: dict[int, int] = {}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    producer: dict[int, int] = {}   # id(region value) -> id(its node)
    entries: dict[int, set] = {}    # id(region node) -> ids of the outside values it reads
    for node in graph.nodes:
        if id(node) in region:
            parent[id(node)] = id(node)
            for v in _tensor_args(node):
                if id(v) in producer:
                    parent[find(id(node))] = find(producer[id(v)])
                else:
                    entries.setdefault(id(node), set()).add(id(v))
            producer[id(node.outputs[0])] = id(node)
    convs: dict[int, list] = {}   # part -> (conv spec, traced input shape) of each conv
    conversions: dict[int, set] = {}
    for node in graph.nodes:
        if id(node) in region:
            part = find(id(node))
            convs.setdefault(part, [])
            if node.op in CONVS:
                convs[part].append((_conv_spec(graph, node), node.args[0].type.shape))
            conversions.setdefault(part, set()).update(("in", v) for v in entries.get(id(node), ()))
        elif not _reads_blocked_as_is(node):
            for v in node.input_values():
                if id(v) in producer:
                    conversions.setdefault(find(producer[id(v)]), set()).add((id(node), id(v)))
    for v in iter_values(graph.outputs):
        if id(v) in producer:
            conversions.setdefault(find(producer[id(v)]), set()).add(("out", id(v)))
    keep = {part for part, specs in convs.items()
            if len(specs) >= MIN_CONVS and len(conversions.get(part, ())) <= MAX_CONVERSIONS_PER_CONV * len(specs)
            and statistics.median(_multiply_adds(spec, shape) for spec, shape in specs) >= MIN_DENSE_MACS
            and (not timed or region_pays(specs, len(conversions.get(part, ())), channels_last))}
    return {i for i in region if find(i) in keep}


def _multiply_adds(spec, shape) -> int:
    weight, _, stride, padding, dilation, _ = spec
    return multiply_adds(weight, stride, padding, dilation, shape)


def _tensor_args(node: Node) -> list:
    """The tensor arguments a region node reads (and a blocked kernel takes): a conv's input, both addends, or the
    first argument."""
    return list(node.args[:2]) if node.op in ADDS else [node.args[0]]


def _fits(node: Node) -> bool:
    """Are ``node``'s arguments what the blocked op takes: 4-d float32 tensors (of one traced shape for an add,
    no alpha), dropout in eval (``train`` False)?"""
    if node.kwargs:
        return False
    if node.op in ADDS:
        return len(node.args) == 2 and all(_f32_4d(a) for a in node.args) and \
            tuple(node.args[0].type.shape) == tuple(node.args[1].type.shape)
    if node.op == "aten::dropout.default":
        return len(node.args) == 3 and node.args[2] is False and _f32_4d(node.args[0])
    return _f32_4d(node.args[0]) and all(not isinstance(a, Value) for a in iter_values(node.args[1:]))


def _result_kind(node: Node) -> str:
    """How a region node's result relates to its first argument: "fresh", "inplace" or "alias" (``BLOCKED``)."""
    return "fresh" if node.op in CONVS else BLOCKED[node.op]


def _reads_blocked_as_is(node: Node) -> bool:
    """Does ``node`` read only a blocked tensor's metadata (a rank guard, ``size``, ``dim``)?"""
    if node.op == GUARD:
        return node.attrs.get("kind") == "rank" and len(node.args) == 1
    return node.op in METADATA_READS


def _safe(graph: Graph, region: set) -> bool:
    """No write outside the region to memory a region value or entry may share, and no reader outside it before a
    region write to what it reads."""
    if not _outside_writes_miss_the_region(graph, region):
        return False
    root: dict[int, int] = {}   # id(region value) -> id of the value whose memory it is
    last_write: dict[int, int] = {}   # memory root -> position of the last region write to it
    for i, node in enumerate(graph.nodes):
        if id(node) not in region:
            continue
        kind = _result_kind(node)
        out = id(node.outputs[0])
        root[out] = root.get(id(node.args[0]), id(node.args[0])) if kind != "fresh" else out
        if kind == "inplace":
            last_write[root[out]] = i
    for i, node in enumerate(graph.nodes):
        if id(node) in region or _reads_blocked_as_is(node):
            continue
        for v in node.input_values():
            if id(v) in root and last_write.get(root[id(v)], -1) > i:
                return False
    return True


def _outside_writes_miss_the_region(graph: Graph, region: set) -> bool:
    """Does every node outside the region that writes (in place, or any other effect) write memory that neither a
    region value nor a region entry may share? A value's memory may be any of its inputs' unless its op returns
    new memory (``ops.is_fresh``: default-deny, an op nobody annotated may alias); a region value's is the
    region's. An entry is converted once, before its first region reader: a later write to its memory would be
    lost, as would a write to a region value's dense copy."""
    REGION = 0
    memory: dict[int, frozenset] = {}   # id(value) -> ids of the values whose memory it may share

    def of(v) -> frozenset:
        return memory.get(id(v), frozenset((id(v),)))

    writes = []
    for node in graph.nodes:
        values = [v for v in node.input_values()]
        if id(node) in region:
            shares = frozenset((REGION,))
        elif is_fresh(node.op) and not node.effectful:
            shares = None
        else:
            shares = frozenset().union(*(of(v) for v in values)) if values else frozenset()
        for out in node.outputs:
            if out is not None:
                memory[id(out)] = frozenset((id(out),)) if shares is None else shares
        if node.effectful and node.op != GUARD and id(node) not in region:
            writes.append(frozenset().union(*(of(v) for v in values)) if values else frozenset())
    entries = frozenset((REGION,)).union(*(of(v) for n in graph.nodes if id(n) in region for v in _tensor_args(n)))
    return not any(w & entries for w in writes)


def _rewrite(graph: Graph, region: set, kernels: list) -> None:
    """Replace the region's nodes with kernel nodes (the later lowering passes, which rewrite ATen nodes, never see
    a blocked tensor); put ``ToBlocked`` before each entry's first region reader, and ``ToDense`` before the first
    other reader of a region tensor (graph outputs: at the end). Values that are one tensor in eager (a result
    and what ``relu_`` / ``add_`` / eval dropout return of it) share one dense copy: ``_safe`` made sure no
    region op writes that tensor after its first outside reader, so the copy stays current, and an output and a
    view of it stay one memory, as eager's are."""
    root: dict[int, int] = {}   # id(region value, after the rewrite) -> id of the value whose memory it is
    blocked: dict[int, Value] = {}   # id(entry value) -> its blocked version
    dense_of: dict[int, Value] = {}  # memory root -> its dense copy
    nodes: list[Node] = []

    def kernel_node(kernel, args, like: Node, value: Value, ops: str) -> Node:
        node = Node(KERNEL, "", args=args, attrs={"index": len(kernels), "ops": ops}, source=like.source,
                    scope=like.scope)
        kernels.append(kernel)
        node.outputs = [Value(value.type, node, 0, value.hint, value.dynamic)]
        return node

    def dense(v, like: Node):
        if not isinstance(v, Value) or id(v) not in root:
            return v
        if root[id(v)] not in dense_of:
            node = kernel_node(ToDense(), (v,), like, v, "onednn:to_dense")
            nodes.append(node)
            dense_of[root[id(v)]] = node.outputs[0]
        return dense_of[root[id(v)]]

    def entry(v, reader: Node):
        if not isinstance(v, Value) or id(v) in root or not _f32_4d(v):
            return v
        if id(v) not in blocked:
            node = kernel_node(ToBlocked(), (v,), reader, v, "onednn:to_blocked")
            nodes.append(node)
            blocked[id(v)] = node.outputs[0]
        return blocked[id(v)]

    renamed: dict[int, Value] = {}   # id(a replaced node's result) -> the kernel node's result
    for node in list(graph.nodes):
        node.args = map_values(node.args, lambda v: renamed.get(id(v), v))
        node.kwargs = map_values(node.kwargs, lambda v: renamed.get(id(v), v))
        if id(node) not in region:
            if not _reads_blocked_as_is(node):
                node.args = map_values(node.args, lambda v: dense(v, node))
                node.kwargs = map_values(node.kwargs, lambda v: dense(v, node))
            nodes.append(node)
            continue
        if node.op in CONVS:
            spec = _conv_spec(graph, node)
            x = entry(node.args[0], node)
            new = kernel_node(BlockedConv(*spec, example_shape=node.args[0].type.shape), (x,), node,
                              node.outputs[0], "onednn:blocked_conv2d")
        elif node.op in ADDS:
            a, b = (entry(v, node) for v in node.args)
            new = kernel_node(BlockedAdd(ADDS[node.op]), (a, b), node, node.outputs[0], "onednn:blocked_add")
        else:
            new = kernel_node(BlockedOp(node.op, tuple(node.args[1:])), (entry(node.args[0], node),), node,
                              node.outputs[0], "onednn:blocked_" + node.name)
        new.effectful = node.effectful
        nodes.append(new)
        out = new.outputs[0]
        fresh = _result_kind(node) == "fresh"
        root[id(out)] = id(out) if fresh else root[id(new.args[0])]   # in place / alias: its first argument's
        renamed[id(node.outputs[0])] = out
    last = nodes[-1]
    graph.outputs = [map_values(o, lambda v: dense(renamed.get(id(v), v), last)) for o in graph.outputs]
    graph.nodes = nodes
