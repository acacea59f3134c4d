"""Symbolic sizes by name for every value the viewer shows (``Float[s0, s1, 32]``).

Which input dimensions are symbolic is ``inspect``'s rule (ir/symbolic_dims.py): the sizes the
graph reads at run time and no guard pins. To name the sizes of the values inside the graph,
the program is run twice on the meta device (shapes only: no data, no kernels) with each
symbolic size moved to other values, under its guards first (a run the guards refuse names
nothing), then with every node's outputs observed (the checker's observed code,
codegen/python.py). A dimension that stays put is the example's number; one that moves is named
from the symbols it follows: ``s0``, ``s0*s1``, ``2*s0+1``, ``s1//2``, or ``?`` when no simple
formula fits. An input dimension with the same example size as a symbolic one is moved too, under
a name of its own when the program accepts that (a ``y`` whose batch nothing ties to ``x``'s),
else with that symbol (``attention_mask`` next to ``input_ids``), else not at all. Then every other
input dimension is moved on its own (at most ``MAX_PROBED_DIMS``, fewer in a big graph): it gets a
name when the program, guards included, runs with it moved (the batch of a Linear, which nothing
reads), and keeps its number when not (a size a reshape to constants or a weight fixes). So an
input size shows as a number only where a guard, a constant or the meta device holds it.
``tracejit inspect`` shows the inputs' names from here too.

The probe runs on a shadow of the module tree (its own dicts of meta tensors and compiled
methods; a module reachable by many paths is shadowed once), so the traced object is never touched,
called or retraced. No kernel runs on data (issue #21, item 5: a file's program must not crash the
viewer): under ``_MetaOnly`` every op sees meta tensors only, a factory op's device becomes meta and
any tensor that is not on the meta device (a ``torch.tensor`` literal) is replaced by a meta tensor
of its shape before the op runs. Anything the meta device cannot run (a value guard reading a
tensor's data, ``.item()``), and a custom autograd Function (user code), leave the shapes inside as
numbers.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from ..codegen.compiler import compile_function
from ..codegen.python import generate
from ..ir import TensorType, Value
from ..ir.symbolic_dims import symbolic_dims
from ..ops.aten import is_inplace
from ..ops.names import split_name
from ..pytree import flatten, unflatten


MAX_PROBED_DIMS = 16       # input dimensions nothing reads that the probe tries to move, at most ...
PROBE_NODE_BUDGET = 8_000   # ... and at most this many nodes run over those probes (each runs the program)
PROBE_MAX_NODES = 5_000     # a program that runs more nodes than this is not probed (names from reads only):
# the probe runs it up to five times on the meta device, ~100 us a node (20,000 nodes: inspect took 4.6 s)
MAX_FORMULA_SYMBOLS = 32   # symbols name_dim combines into products and formulas; beyond: '?'


class _Refused(Exception):
    """A guard or input check refused the probe's sizes."""


def value_dims(program, graph) -> dict:
    """``{id(Value): ("s0", "8", ...)}`` for the values of ``graph`` (a root method of ``program``) and
    of the submodule graphs it calls (each graph's first call), where a size is symbolic; only the
    inputs' names when the probe cannot run; ``{}`` when nothing is symbolic."""
    seeds = symbolic_dims(graph)
    inputs = {id(v): v for v in graph.inputs}
    examples = {name: inputs[vid].type.shape[dim] for (vid, dim), name in seeds.items()}
    companions = _companions(graph, seeds, examples)
    # each companion under its own name, then moved with its symbol, then left alone
    own = {key: f"s{len(examples) + i}" for i, key in enumerate(companions)}
    size = _expanded_nodes(graph, {})
    if size > PROBE_MAX_NODES:   # the probe's cost is the program's expanded size: names from the reads only
        return _inputs_only(inputs, seeds)
    runner = _Runner(program, graph)
    plans = [{**seeds, **own}, {**seeds, **companions}, dict(seeds)]
    for plan in [p for i, p in enumerate(plans) if p not in plans[:i]]:
        if not _accepts(runner, inputs, plan):   # a guard refused, or the meta device cannot run an op
            continue
        plan = _other_dims(runner, graph, inputs, plan, size)
        if not plan:
            return {}
        try:
            return _named(*_probe(runner, inputs, plan), inputs, plan)
        except Exception:   # noqa: BLE001  the observed run failed where the guarded one did not
            break
    return _inputs_only(inputs, seeds)


def _probe(runner, inputs: dict, plan: dict, observe: bool = True) -> tuple:
    """(the two runs, symbols' example sizes, their offsets) of the probe that moves ``plan``'s sizes;
    without ``observe``, one run under the guards only (raises when refused)."""
    symbols = {name: inputs[vid].type.shape[dim] for (vid, dim), name in plan.items()}
    offsets = _offsets(symbols)
    runs = [runner.probe({key: symbols[name] + offsets[name][run] for key, name in plan.items()}, observe)
            for run in ((0, 1) if observe else (1,))]
    return runs, symbols, offsets


def _accepts(runner, inputs: dict, plan: dict) -> bool:
    """Whether the program, guards included, runs on the meta device with ``plan``'s sizes moved."""
    try:
        _probe(runner, inputs, plan, observe=False)
    except Exception:   # noqa: BLE001  a guard refused, or the meta device cannot run an op
        return False
    return True


def _other_dims(runner, graph, inputs: dict, plan: dict, size: int) -> dict:
    """``plan`` with the input dimensions nothing reads added, each moved on its own (a name of its own
    when the program, guards included, runs with it moved: a batch a Linear never reads); at most
    MAX_PROBED_DIMS, fewer for a big program (each costs one run on the meta device)."""
    others = [(id(v), d) for v in graph.inputs if isinstance(v.type, TensorType) and -1 not in v.type.shape
              for d in range(len(v.type.shape)) if (id(v), d) not in plan]
    used = {int(n[1:]) for n in plan.values()}
    for key in others[:min(MAX_PROBED_DIMS, PROBE_NODE_BUDGET // max(1, size))]:
        name = f"s{next(i for i in range(len(used) + 1) if i not in used)}"
        if _accepts(runner, inputs, {**plan, key: name}):   # else the program refuses it moved: a number
            plan = {**plan, key: name}
            used.add(int(name[1:]))
    return plan


def _expanded_nodes(graph, memo: dict) -> int:
    """Nodes one call of ``graph`` runs, its submodule calls' included (memoised per graph)."""
    if id(graph) in memo:
        return memo[id(graph)]
    memo[id(graph)] = 0   # a cycle counts nothing more
    n = len(graph.nodes)
    for node in graph.nodes:
        callee = graph.callees.get((node.attrs.get("path"), node.attrs.get("method"))) \
            if node.op == "tracejit::call_module" else None
        if callee is not None:
            n += _expanded_nodes(callee, memo)
    memo[id(graph)] = n
    return n


def _named(runs: list, symbols: dict, offsets: dict, inputs: dict, plan: dict) -> dict:
    sym = [(name, e, e + offsets[name][0], e + offsets[name][1]) for name, e in symbols.items()]
    out = {}
    for vid, (value, first) in runs[0].items():
        second = runs[1].get(vid, (None, None))[1]
        if second is None or not len(first) == len(second) == len(value.type.shape):
            continue
        dims = tuple(name_dim((int(a), int(b), int(c)), sym) for a, b, c in zip(value.type.shape, first, second))
        if any(not d.isdigit() for d in dims):
            out[vid] = dims
    out.update(_inputs_only(inputs, plan, out))
    return out


def _inputs_only(inputs: dict, seeds: dict, named: dict | None = None) -> dict:
    """The graph inputs' sizes with the names ``seeds`` gives them (over what the probe named)."""
    out = {}
    for (vid, dim), name in seeds.items():
        dims = list(out.get(vid) or (named or {}).get(vid) or [str(int(s)) for s in inputs[vid].type.shape])
        dims[dim] = name
        out[vid] = tuple(dims)
    return out


def _offsets(symbols: dict) -> dict:
    """Per symbol, how far each of the two runs moves it: ``(d, d * (d + 1))`` with a different
    ``d`` per symbol (so no two symbols move in proportion, and ``2*s0+3`` cannot pass for
    ``s1+1``) and distinct moved sizes in each run."""
    out, used = {}, (set(), set())
    d = 1
    for name in symbols:
        while True:
            moved = (symbols[name] + d, symbols[name] + d * (d + 1))
            if moved[0] not in used[0] and moved[1] not in used[1]:
                break
            d += 1
        used[0].add(moved[0])
        used[1].add(moved[1])
        out[name] = (d, d * (d + 1))
        d += 1
    return out


def _companions(graph, seeds: dict, symbols: dict) -> dict:
    """Input dimensions not symbolic themselves whose example size equals exactly one symbol's."""
    by_size = {}
    for name, size in symbols.items():
        by_size.setdefault(size, []).append(name)
    out = {}
    for v in graph.inputs:
        if not isinstance(v.type, TensorType) or -1 in v.type.shape:
            continue
        for d, s in enumerate(v.type.shape):
            if (id(v), d) not in seeds and len(by_size.get(s, ())) == 1:
                out[(id(v), d)] = by_size[s][0]
    return out


def name_dim(triple: tuple, symbols: list) -> str:
    """A dimension's sizes (example, run 1, run 2) named after the symbols' (name, example, run 1, run 2)."""
    a, b, c = triple
    if a == b == c:
        return str(a)
    for name, e, x, y in symbols:
        if (e, x, y) == triple:
            return name
    symbols = symbols[:MAX_FORMULA_SYMBOLS]   # products and formulas: of the first symbols only (a file may
    for i, (n1, e1, x1, y1) in enumerate(symbols):   # hold 19,200; the pairs would be quadratic)
        for n2, e2, x2, y2 in symbols[i:]:
            if (e1 * e2, x1 * x2, y1 * y2) == triple:
                return f"{n1}*{n2}"
    for name, e, x, y in symbols:
        if (b - a) % (x - e) == 0:
            p = (b - a) // (x - e)
            q = a - p * e
            if p != 0 and p * y + q == c:
                return _affine(name, p, q)
        for m in range(2, 65):
            if (e // m, x // m, y // m) == triple:
                return f"{name}//{m}"
    return "?"


def _affine(name: str, p: int, q: int) -> str:
    text = name if p == 1 else f"-{name}" if p == -1 else f"{p}*{name}"
    return text if q == 0 else f"{text}{'+' if q > 0 else '-'}{abs(q)}"


# ---- running the program on the meta device ------------------------------------------------------
class _Runner:
    """Runs one root graph on meta inputs, twice per probe: under its guards (raises when refused),
    then observed. The shadows and their compiled methods are made once and reused by every probe."""

    def __init__(self, program, graph):
        self.graph = graph
        self.seen: dict = {}   # the observed run's record: id(Value) -> (Value, shape)
        self.entries = {m.path: m for m in program.modules}
        root = None if program.kind == "function" else program.root
        self.compiled: dict = {}   # (id(graph), name, guards) -> the compiled function, shared by shadows
        self.writes: dict = {}     # id(graph) -> whether a node of it may write in place (see reusable)
        made: dict = {}            # (entry path, guards) -> its shadow
        self.shadows = {guards: _Shadow(root, self, guards=guards, made=made) for guards in (True, False)}
        self.roots = {guards: _method(self.shadows[guards], graph, graph.name, guards, self)
                      for guards in (True, False)}

    def reusable(self, graph) -> bool:
        """Whether a call of ``graph`` may be answered from an earlier one with the same inputs (no node of it
        may write in place: _may_write). Scanned once per graph on its first call, not once per method bound
        to it: 190 methods of one 1,000-node graph scanned 380,000 nodes (0.3 of inspect's 1.2 CPU seconds)."""
        if id(graph) not in self.writes:
            self.writes[id(graph)] = any(_may_write(node.op) for node in graph.nodes)
        return not self.writes[id(graph)]

    def probe(self, sizes: dict, observe: bool = True) -> dict:
        """``{id(Value): (Value, shape)}`` of every graph's first call with ``sizes``
        ({(id(input), dim): size}) moved; without ``observe``, only the run under the guards (raises
        when refused)."""
        leaves = []
        for leaf in self.graph.input_leaves:
            if isinstance(leaf, Value):
                if not isinstance(leaf.type, TensorType) or -1 in leaf.type.shape:
                    raise _Refused("a non-tensor or ragged input")
                shape = [sizes.get((id(leaf), d), s) for d, s in enumerate(leaf.type.shape)]
                leaves.append(torch.empty(shape, dtype=leaf.type.dtype, device="meta"))
            else:
                leaves.append(leaf)
        args, kwargs = unflatten(self.graph.in_spec, leaves)
        self.seen, self.memo = {}, {}
        with torch.no_grad(), _MetaOnly():
            self.roots[True](*args, **kwargs)
            if observe:
                self.roots[False](*args, **kwargs)
        return self.seen


class _MetaOnly(TorchDispatchMode):
    """Every op the probe dispatches runs on the meta device: shapes only, never a kernel on data."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        args, kwargs = tree_map(_on_meta, (args, kwargs or {}))
        if "device" in kwargs:
            kwargs["device"] = torch.device("meta")
        return func(*args, **kwargs)


def _on_meta(x):
    if isinstance(x, torch.Tensor) and x.device.type != "meta":
        return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, torch.device) and x.type != "meta":
        return torch.device("meta")
    return x


def _fresh(x):
    return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device="meta") \
        if isinstance(x, torch.Tensor) else x


def _meta(t):
    return None if t is None else torch.empty(t.shape, dtype=t.dtype, device="meta") \
        if isinstance(t, torch.Tensor) else t


class _Shadow:
    """What generated code reads from ``self`` (``_modules``, ``_parameters``, ``_buffers``,
    ``training`` and the traced methods), as meta tensors and freshly compiled methods, made from the
    program's ModuleEntry ``entry`` (None: a function's ``self``)."""

    def __init__(self, entry, runner: _Runner, *, guards: bool, made: dict, depth: int = 0):
        made[(None if entry is None else entry.path, guards)] = self
        self.training = False if entry is None else entry.training
        self._parameters = {} if entry is None else {n: _meta(p) for n, p in entry.parameters}
        self._buffers = {} if entry is None else {n: _meta(b) for n, b in entry.buffers}
        self._modules = {}
        for n, child in (() if entry is None else entry.children):
            if child is not None and depth < 64:
                shadow = made.get((child, guards))
                self._modules[n] = shadow if shadow is not None else \
                    _Shadow(runner.entries[child], runner, guards=guards, made=made, depth=depth + 1)
        for name, graph in (() if entry is None else entry.methods):
            setattr(self, name, _method(self, graph, name, guards, runner))


def _method(shadow, graph, name: str, guards: bool, runner: _Runner):
    """The shadow's method for ``graph``: compiled on first use, with guards or observed."""
    compiled = runner.compiled.setdefault((id(graph), name, guards), [])

    def refuse(*_args, **_kwargs):
        raise _Refused(name)

    def run(*args, **kwargs):
        if not compiled:
            if any(node.op == "tracejit::autograd_function" for node in graph.nodes):
                raise _Refused("a custom autograd Function would run user code")
            # a loaded program's checked int arithmetic and size checks too: `size ** 10**18` ran for ever here
            src, globs = generate(graph, name, guards=guards, input_error=refuse, observe=not guards,
                                  budget=getattr(graph, "call_budget", None))
            globs = {k: (_meta(v) if isinstance(v, torch.Tensor) else v) for k, v in globs.items()}
            globs["_tj_guard"] = refuse
            globs["_observe"] = lambda i, outs: _record(runner.seen, graph.nodes[i], outs)
            compiled.append(compile_function(src, name, globs, "viewer-sizes"))
        if not guards:
            _record_inputs(runner.seen, graph, args, kwargs)
        key = _call_key(shadow, graph, guards, args, kwargs) if runner.reusable(graph) else None   # else each runs
        if key is not None and key in runner.memo:   # the same call again: only its first call records shapes
            return tree_map(_fresh, runner.memo[key])   # fresh tensors: the caller may write to what it gets
        out = compiled[0](shadow, *args, **kwargs)
        if key is not None:
            runner.memo[key] = tree_map(_fresh, out)
        return out
    return run


def _call_key(shadow, graph, guards: bool, args, kwargs):
    """What a method's meta run depends on: the module, the graph and its inputs' shapes, dtypes and strides
    (plain values as they are); None (no reuse) when an input is another object. A module calling a
    submodule twice with the same shapes (8 levels of that: 256 runs) then runs it once per probe."""
    parts = []
    for leaf in flatten((tuple(args), kwargs))[0]:
        if isinstance(leaf, torch.Tensor):
            parts.append((tuple(leaf.shape), leaf.dtype, tuple(leaf.stride())))
        elif leaf is None or type(leaf) in (int, float, bool, str):
            parts.append((type(leaf), leaf))
        else:
            return None
    return id(shadow), id(graph), guards, tuple(parts)


def _may_write(op: str) -> bool:
    """An op that could change what a later call of its graph sees: in place by its schema, or (default-deny,
    for an op without one) by its name's trailing ``_``."""
    return is_inplace(op) or split_name(op).name.endswith("_")


def _record_inputs(seen: dict, graph, args, kwargs) -> None:
    plain = {k: v for k, v in kwargs.items() if not k.startswith("_capture_")}
    captures = [kwargs[k] for k in sorted((k for k in kwargs if k.startswith("_capture_")),
                                          key=lambda k: int(k.rsplit("_", 1)[1]))]
    leaves, _ = flatten((tuple(args), plain))
    pairs = list(zip(graph.input_leaves, leaves))
    pairs += zip([v for v in graph.inputs if v.capture], captures)
    for v, o in pairs:
        if isinstance(v, Value) and isinstance(o, torch.Tensor) and isinstance(v.type, TensorType):
            seen.setdefault(id(v), (v, tuple(o.shape)))


def _record(seen: dict, node, outs) -> None:
    for v, o in zip(node.outputs, outs):
        if v is not None and isinstance(o, torch.Tensor) and isinstance(v.type, TensorType):
            seen.setdefault(id(v), (v, tuple(o.shape)))   # a graph called twice: its first call
