"""Doc strings for an exported ONNX model: where each node came from, for Netron and other viewers.

``SourceNotes`` is handed the onnx-ir graph while the exporter lowers the traced graph; after each
IR node is lowered, every ONNX node that lowering appended gets a doc string naming the ATen op,
the user's source line that ran it and the ledger entries (frozen values, guards) recorded at that
line. The model's own doc string lists the whole ledger. Netron shows both ("description").
"""
from __future__ import annotations

from ..ir import Graph, Node


def _line_key(source) -> tuple | None:
    if source is None:
        return None
    return (getattr(source, "filename", None), getattr(source, "lineno", None))


def ledger_of(traced) -> tuple:
    """The traced program's ledger entries (empty for an object without one)."""
    return tuple(getattr(traced, "ledger", ()) or ())


def ledger_text(entry) -> str:
    guard = " (checked at every call by a guard)" if getattr(entry, "guard", None) is not None else ""
    return f"[{entry.kind}] {entry.message} (value seen: {entry.value!r}){guard}"


def call_sites(graph: Graph, prefix: str = "", outer: tuple = ()) -> dict:
    """{submodule path: ((path, source line of the call), ...) outermost first} of the submodule
    calls in a traced (not inlined) graph: the user's lines behind a node that ran in torch's code."""
    sites = {}
    for node in graph.nodes:
        if node.op != "tracejit::call_module":
            continue
        path = prefix + node.attrs["path"]
        chain = outer + ((path, node.source),)
        sites.setdefault(path, chain)
        callee = graph.callees.get((node.attrs["path"], node.attrs["method"]))
        if isinstance(callee, Graph):
            for inner, inner_chain in call_sites(callee, path + ".", chain).items():
                sites.setdefault(inner, inner_chain)
    return sites


def _method_graph(program, method: str):
    return program.root.method(method) if method in program.root.method_names else None


class SourceNotes:
    """Writes a doc string on the ONNX nodes each traced node lowers to."""

    def __init__(self, onnx_graph, program, graph: Graph, method: str = "forward"):
        self.onnx_graph = onnx_graph
        outer = _method_graph(program, method)
        self.sites = call_sites(outer) if outer is not None else {}
        self.by_line: dict[tuple, list[str]] = {}
        for entry in ledger_of(program):
            key = _line_key(entry.source)
            if key is not None:
                self.by_line.setdefault(key, []).append(ledger_text(entry))
        for node in graph.nodes:   # guards the ledger does not list (guards of a specialization, ...)
            if node.op == "tracejit::guard" and node.source is not None:
                what = node.attrs.get("what") or node.attrs.get("test")
                text = f"[guard {node.attrs.get('kind')}] {what}"
                lines = self.by_line.setdefault(_line_key(node.source), [])
                if not any(what and str(what) in line for line in lines):
                    lines.append(text)
        self.count = onnx_graph.num_nodes()

    def text(self, node: Node) -> str:
        parts = [node.op]
        if node.source is not None:
            function = f" (in {node.source.function})" if getattr(node.source, "function", "") else ""
            parts.append(f"source: {node.source}{function}")
        if node.scope:
            parts.append(f"module: {node.scope}")
            chain = self.sites.get(node.scope, ())
            if chain:
                parts.append("called from: " + " > ".join(f"{src} ({path})" for path, src in chain))
        for line in self.by_line.get(_line_key(node.source), ()):
            parts.append(f"ledger: {line}")
        return "\n".join(parts)

    def after(self, node: Node) -> None:
        """Tag the ONNX nodes appended since the last call with ``node``'s note."""
        total = self.onnx_graph.num_nodes()
        new = total - self.count
        self.count = total
        if new <= 0:
            return
        text = self.text(node)
        for k, onnx_node in enumerate(reversed(self.onnx_graph)):
            if k >= new:
                break
            onnx_node.doc_string = text if not onnx_node.doc_string else f"{onnx_node.doc_string}\n{text}"

    def model_doc(self, program) -> str:
        """The model's doc string: what ``program`` (a Program) was traced from, and its ledger."""
        entries = ledger_of(program)
        kind = "TracedModule" if program.kind == "module" else "TracedFunction"
        head = f"exported by tracejit from {kind} {program.name}".rstrip()
        if not entries:
            return head + "; the trace's ledger is empty"
        return "\n".join([head, f"ledger ({len(entries)} entries):"] +
                         [f"  {e.source or '-'}: {ledger_text(e)}" for e in entries])
