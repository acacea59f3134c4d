"""How far a program expands: bounded at load, before any graph is decoded (issue #21, item 4).

A module program is a DAG: a method's graph calls submodules' methods (``tracejit::call_module``),
and one module may be reachable by several paths of the module tree. What the stored document
holds is linear in the file's size; what a walk over every call (inlining, the ONNX exporter) or
every module path (``named_modules(remove_duplicate=False)``, ``state_dict``) visits is not: a chain
of 40 methods each calling the next twice expands to 2^40 calls, 40 modules each holding the next
twice are reachable by 2^40 paths. Both counts are computed here in one memoised pass over the
document (linear in its size) and refused above ``limits.max_expanded(stored nodes)``:

- **calls**: the expanded size of each root method, ``size(graph) + sum of size(callee)`` over its
  call nodes, where ``size(graph)`` counts its nodes and every value in its arguments and
  attributes (a guard's 100,000-element ``expected`` list weighs 100,000 at every call);
- **paths**: per module, the number of module-tree paths that reach it, times what each path names
  (one module, its parameters and buffers), summed.
"""
from __future__ import annotations

from ..errors import LoadError
from . import limits

CALL_MODULE = "tracejit::call_module"


class _Cycle(Exception):
    pass


def check_expansion(program: dict) -> None:
    """Raise LoadError when the program's calls or module paths expand beyond the bound."""
    graphs, modules = program.get("graphs"), program.get("modules")
    if not isinstance(graphs, list) or not isinstance(modules, list):
        return   # the loader refuses the malformed document itself
    entries = {m["path"]: m for m in modules if isinstance(m, dict) and isinstance(m.get("path"), str)}
    if "" not in entries:
        return
    stored = sum(len(g["nodes"]) for g in graphs if isinstance(g, dict) and isinstance(g.get("nodes"), list))
    bound = limits.max_expanded(stored)
    children = {path: _children(e) for path, e in entries.items()}
    try:
        calls = _expanded_calls(entries, graphs, children, bound)
    except _Cycle:
        return   # the module tree holds a cycle: the loader refuses it, naming the module
    if calls > bound:
        raise LoadError(f"the program's calls expand to more than {bound} nodes (it stores {stored}): "
                        "methods that call shared methods many times over")
    paths = _module_paths(entries, children, bound)
    if paths > bound:
        raise LoadError(f"the module tree names more than {bound} modules and tensors over all its paths "
                        f"(it describes {len(entries)} modules): modules reachable by very many paths")


def _children(entry: dict) -> dict:
    out = {}
    kids = entry.get("children")
    for pair in kids if isinstance(kids, list) else []:
        if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and isinstance(pair[1], str):
            out[pair[0]] = pair[1]
    return out


def _methods(entry: dict) -> dict:
    out = {}
    ms = entry.get("methods")
    for pair in ms if isinstance(ms, list) else []:
        if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and isinstance(pair[1], int) \
                and not isinstance(pair[1], bool):
            out[pair[0]] = pair[1]
    return out


def values_in(x) -> int:
    """The number of JSON values in ``x`` (iteratively: no recursion on deep input)."""
    n, stack = 0, [x]
    while stack:
        y = stack.pop()
        n += 1
        if isinstance(y, list):
            stack.extend(y)
        elif isinstance(y, dict):
            stack.extend(y.values())
    return n


def _graph_size(graph) -> tuple[int, list]:
    """(own weight, [(relative module path, method)] of its calls) of a stored graph."""
    nodes = graph.get("nodes") if isinstance(graph, dict) else None
    if not isinstance(nodes, list):
        return 1, []
    weight, calls = 1, []
    for n in nodes:
        if not isinstance(n, dict):
            continue
        weight += values_in(n.get("args")) + values_in(n.get("kwargs")) + values_in(n.get("attrs"))
        attrs = n.get("attrs")
        if n.get("op") == CALL_MODULE and isinstance(attrs, dict) and isinstance(attrs.get("path"), str) \
                and isinstance(attrs.get("method"), str):
            calls.append((attrs["path"], attrs["method"]))
    return weight, calls


def _resolve(path: str, rel: str, children: dict) -> str | None:
    for part in rel.split("."):
        path = children.get(path, {}).get(part)
        if path is None:
            return None
    return path


def _expanded_calls(entries: dict, graphs: list, children: dict, bound: int) -> int:
    sizes: dict[int, tuple] = {}
    memo: dict[tuple, int] = {}
    methods = {path: _methods(e) for path, e in entries.items()}

    def size_of(idx: int) -> tuple:
        if idx not in sizes:
            sizes[idx] = _graph_size(graphs[idx]) if 0 <= idx < len(graphs) else (1, [])
        return sizes[idx]

    def expanded(path: str, method: str) -> int:
        """Iterative post-order over (module path, method); raises _Cycle on a cycle."""
        stack = [(path, method, False)]
        active: set = set()
        while stack:
            p, m, done = stack.pop()
            key = (p, m)
            if key in memo:
                continue
            idx = methods.get(p, {}).get(m)
            if idx is None:
                memo[key] = 1   # a call the loader refuses itself
                continue
            weight, calls = size_of(idx)
            targets = [(q, cm) for q, cm in ((_resolve(p, rel, children), cm) for rel, cm in calls) if q is not None]
            if done:
                active.discard(key)
                memo[key] = min(bound + 1, weight + sum(memo.get(t, 1) for t in targets))
                continue
            if key in active:
                raise _Cycle   # calls down the module tree loop only where the tree does
            active.add(key)
            stack.append((p, m, True))
            stack.extend((q, cm, False) for q, cm in targets if (q, cm) not in memo)
        return memo[(path, method)]

    total = 0
    for name in methods[""]:
        total += expanded("", name)
        if total > bound:
            break
    return total


def _module_paths(entries: dict, children: dict, bound: int) -> int:
    """Sum over module-tree paths of what each names; a cycle is left to the loader's own check."""
    weight = {p: 1 + _count(e.get("parameters")) + _count(e.get("buffers")) for p, e in entries.items()}
    order, seen, stack = [], set(), [("", False)]
    while stack:   # post-order from the root, then paths(child) = sum of paths(parent) over its edges
        p, done = stack.pop()
        if done:
            order.append(p)
            continue
        if p in seen:
            continue
        seen.add(p)
        stack.append((p, True))
        stack.extend((c, False) for c in children.get(p, {}).values() if c in entries and c not in seen)
    paths = {p: 0 for p in order}
    paths[""] = 1
    total = 0
    for p in reversed(order):   # parents before children (reverse post-order of a DAG)
        total += paths[p] * weight[p]
        if total > bound:
            return total
        for c in children.get(p, {}).values():
            if c in paths:
                paths[c] += paths[p]
    return total


def _count(x) -> int:
    return len(x) if isinstance(x, list) else 0
