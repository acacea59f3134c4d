"""Graph -> text, in the style of TorchScript's graph printer.

Names are given here, at print time: inputs keep the traced function's
argument names, other values are numbered ``%1, %2, ...``.
"""
from __future__ import annotations

import torch

from .graph import Graph, Node, Value, set_formatter
from .ops import OPS
from ..escape import terminal


class Namer:
    """Gives every Value a unique, readable name, in order of definition."""

    def __init__(self, graph: Graph, sigil: str = "%"):
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.sigil = sigil
        self.counter = 0
        for v in graph.inputs:
            self.define(v, v.hint or ("capture" if v.capture else "input"))

    def define(self, v: Value, hint: str | None = None) -> str:
        if hint:
            base = _sanitize(hint)
            name, i = base, 1
            while name in self.used:
                name = f"{base}_{i}"
                i += 1
        else:
            self.counter += 1
            name = str(self.counter)
            while name in self.used:
                self.counter += 1
                name = str(self.counter)
        self.used.add(name)
        self.names[id(v)] = name
        return name

    def __getitem__(self, v: Value) -> str:
        return self.sigil + self.names[id(v)]


def _sanitize(hint: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in hint)
    return out if out and not out[0].isdigit() else "_" + out


def format_const(c) -> str:
    if isinstance(c, torch.dtype):
        return str(c)
    if isinstance(c, torch.device):
        return f"device({str(c)!r})"
    if isinstance(c, (list, tuple)):
        inner = ", ".join(format_const(x) for x in c)
        return f"[{inner}]" if isinstance(c, list) else f"({inner}{',' if len(c) == 1 else ''})"
    if isinstance(c, slice):
        return f"slice({format_const(c.start)}, {format_const(c.stop)}, {format_const(c.step)})"
    return repr(c)


def format_arg(a, namer: Namer) -> str:
    if isinstance(a, Value):
        return namer[a]
    if isinstance(a, list):
        return "[" + ", ".join(format_arg(x, namer) for x in a) + "]"
    if isinstance(a, tuple):
        return "(" + ", ".join(format_arg(x, namer) for x in a) + ("," if len(a) == 1 else "") + ")"
    if isinstance(a, dict):
        return "{" + ", ".join(f"{k!r}: {format_arg(v, namer)}" for k, v in a.items()) + "}"
    if isinstance(a, slice):
        return f"slice({format_arg(a.start, namer)}, {format_arg(a.stop, namer)}, {format_arg(a.step, namer)})"
    return format_const(a)


def format_node(node: Node, namer: Namer, with_types: bool = True) -> str:
    outs = []
    for v in node.outputs:
        if v is None:
            outs.append("_")
        else:
            name = namer[v] if id(v) in namer.names else namer.sigil + namer.define(v)
            outs.append(f"{name} : {v.type}" if with_types else name)
    args = [format_arg(a, namer) for a in node.args]
    args += [f"{k}={format_arg(v, namer)}" for k, v in node.kwargs.items()]
    attrs = ""
    if node.attrs:
        d = OPS.get(node.op)
        keys = (d.shown if d else ()) + ("grad", "autocast")   # grad-mode / autocast regions: any node
        shown = {k: node.attrs[k] for k in keys if k in node.attrs}
        if shown:
            attrs = "[" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + "]"
    lhs = ", ".join(outs) if outs else "()"
    src = f"  # {terminal(str(node.source))}" if node.source is not None else ""   # a file's name: one line
    return f"{lhs} = {node.op}{attrs}({', '.join(args)}){src}"


def format_graph(graph: Graph, with_source: bool = True, with_types: bool = True) -> str:
    namer = Namer(graph)
    head = ",\n      ".join(f"{namer[v]} : {v.type}" if with_types else namer[v] for v in graph.inputs)
    lines = [f"graph({head}):"]
    for node in graph.nodes:
        text = format_node(node, namer, with_types)
        if not with_source and "  # " in text:
            text = text[: text.rindex("  # ")]
        lines.append("  " + text)
    outs = ", ".join(format_arg(o, namer) for o in graph.outputs)
    lines.append(f"  return ({outs})")
    return "\n".join(lines) + "\n"


set_formatter(format_graph)   # str(graph) (ir/graph.py) prints with it
