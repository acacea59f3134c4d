"""``tracejit inspect FILE [--graph] [--code]``: describe a saved program without running it.

The file's Program is read on the meta device (serialize.read_program: the checksum and graphs are
validated, no tensor is materialized, nothing is compiled and the model never runs); everything printed,
``--code`` too (codegen/program_code.py), comes from that Program, never from the runtime's objects."""
from __future__ import annotations

import argparse
import os
import struct

from .common import (CLIError, escape, human, methods_of, op_histogram, plural, read_program, sha256_file,
                     dtype_name, short_path, table, tensor_rows)
from .guard_table import guard_rows
from ..errors import LoadError
from ..ir import Value
from ..serialize.archive import MAX_HEADER
from ..serialize.loader import read_header
from ..codegen.program_code import method_sources
from ..codegen.signature_text import signature_text
from ..ir.graph import _DTYPE_NAMES as TORCHSCRIPT_TYPE_NAMES
from ..ir.symbolic_dims import symbolic_dims
from ..viewer.sizes import value_dims   # the viewer's names: probed on the meta device, no data
from .specs import DEBUG_HELP, FORMATTER, wrap

def register(sub) -> None:
    ins = sub.add_parser(
        "inspect", formatter_class=FORMATTER, help="describe a saved program without running it",
        description=wrap("Describe a saved tracejit program without running it: the traced methods of the root and "
                         "their input signatures; the parameters and buffers (name, shape, dtype, bytes) with totals "
                         "(a tensor shared by several names counted once); the ledger (what the trace froze: kind, "
                         "source line, message); a histogram of the ops over all graphs; the file's SHA-256 and its "
                         "stored CRC32. Sizes the graph keeps symbolic show as s0, s1, ..., named as 'tracejit view' names them. The "
                         "program is loaded on the meta device: the file's checksum and graphs are validated, no tensor "
                         "is materialized, and the model never runs on data (sizes are probed with meta tensors)."),
        epilog="example:\n  tracejit inspect model.tjit --graph --code")
    ins.add_argument("file", metavar="FILE", help="a program saved by tracejit.save or 'tracejit trace'")
    ins.add_argument("--graph", action="store_true",
                     help="also print the IR graph of every traced method (root and submodules)")
    ins.add_argument("--code", action="store_true",
                     help="also print the generated Python code of every traced method (root and submodules)")
    ins.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    ins.set_defaults(func=cmd_inspect)


def read_document(path: str) -> dict:
    """The ``tracejit`` program document of a saved file, read from its header only (with the
    loader's header reader: serialize/loader.py)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        data = head + f.read(min(n, MAX_HEADER))
    try:
        return read_header(data, size)[2]
    except LoadError as e:
        raise CLIError(f"{path}: cannot load: {e}") from None


def signature(name: str, graph, dims: dict | None = None) -> str:
    """``forward(x: Float[s0, 3, 32, 32], flag=True)``: each argument's traced dtype and sizes, the
    sizes the graph keeps symbolic by name (ir/symbolic_dims.py); with ``dims`` (the viewer's names,
    viewer/sizes.py ``value_dims``: also the input sizes that move with those, as an attention mask's
    with the ids'), by those names."""
    symbolic = symbolic_dims(graph)
    for leaf in graph.input_leaves:
        named = (dims or {}).get(id(leaf)) if isinstance(leaf, Value) else None
        if named is not None and hasattr(leaf.type, "shape") and len(named) == len(leaf.type.shape):
            symbolic.update({(id(leaf), d): n for d, n in enumerate(named) if not n.isdigit()})

    def leaf_text(leaf) -> str:
        if not isinstance(leaf, Value):
            return repr(leaf)
        t = leaf.type
        if not hasattr(t, "shape"):
            return str(t)
        dims = [symbolic.get((id(leaf), d), str(int(s))) for d, s in enumerate(t.shape)]
        return f"{TORCHSCRIPT_TYPE_NAMES.get(t.dtype, dtype_name(t.dtype))}[{', '.join(dims)}]"
    return signature_text(name, graph, leaf_text)


def cmd_inspect(args) -> int:
    path = args.file
    program = read_program(path, map_location="meta")   # validates checksum and graphs; reads no weights, compiles
    doc = read_document(path)                             # nothing, runs nothing
    size = os.path.getsize(path)
    out = []
    is_fn = program.kind == "function"
    name = program.name
    mode = "" if is_fn else f" ({'train' if program.training else 'eval'} mode)"
    # every line below holds at most one line of each file string: escape() writes a file's newline as \n
    out.append(f"{escape(path)}: tracejit {'function' if is_fn else 'module'} {escape(name)}{mode}")
    out.append(f"  size:    {size} bytes ({human(size)})")
    out.append(f"  sha256:  {sha256_file(path)}")
    out.append(f"  crc32:   {escape(doc.get('crc32'))} (stored; verified)")
    out.append(f"  format:  {escape(doc.get('format'))} schema {escape(doc.get('schema_version'))}, "
               f"saved by tracejit {escape(doc.get('tracejit_version'))}")

    methods = methods_of(program)
    out.append("")
    out.append("methods:")
    roots = [(mname, graph) for p, _, mname, graph in methods if p == ""]
    named = [(mname, graph, value_dims(program, graph)) for mname, graph in roots]
    out += [f"  {escape(signature(mname, graph, dims))}" for mname, graph, dims in named]
    if any(dims or symbolic_dims(graph) for _, graph, dims in named):
        out.append("  (s0, s1, ...: sizes the program accepts other values of, as 'tracejit view' names them; "
                   "numbers: the sizes of the trace's example)")
    n_sub = sum(1 for p, *_ in methods if p)
    if n_sub:
        n_mods = len({p for p, *_ in methods if p})
        out.append(f"  (and {n_sub} traced method(s) of {n_mods} submodule(s); see --graph)")

    out += _specialization_lines(program)
    out += _tensor_lines(program, methods)

    ledger = program.ledger
    out.append("")
    out.append(f"ledger: {plural(len(ledger), 'entry', 'entries')}")
    if ledger:
        lrows = [[e.kind, f"{short_path(e.source.filename)}:{e.source.lineno}" if e.source else "-",
                  " ".join(str(e.message).split())] for e in ledger]
        out += table(lrows, ["kind", "source", "message"], "<<<")

    grows = guard_rows(methods)
    out += ["", f"guards: {len(grows)} (checked at every call; see docs/DESIGN.md, Guards)"]
    out += table(grows, ["method", "kind", "source", "predicate", "expected"], "<<<<<") if grows else []

    hist = op_histogram(program)
    out.append("")
    out.append(f"ops: {sum(hist.values())} nodes in {len(methods)} graph(s)")
    if hist:
        hrows = [[c, op] for op, c in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))]
        out += table(hrows, ["count", "op"], "><")

    code = method_sources(program) if args.code else {}
    shown: dict = {}   # id(graph) -> the label it was printed under: a graph shared by many methods prints once
    for p, _, mname, graph in methods:
        label = f"{p}.{mname}" if p else mname
        first = shown.setdefault((id(graph), p == ""), label)
        if first != label and (args.graph or args.code):
            out += ["", f"graph and code of {escape(label)}: as {escape(first)}'s"]
            continue
        if args.graph:
            out.append("")
            out.append(f"graph of {escape(label)}:")
            out.append(str(graph).rstrip("\n"))   # the printer escapes the file's strings it shows
        if args.code:
            out.append("")
            out.append(f"code of {escape(label)}:")
            out.append(code[("", "forward") if program.kind == "function" else (p, mname)].rstrip("\n"))
    print(escape("\n".join(out), keep_newlines=True))
    return 0


def _specialization_lines(program) -> list:
    """Each root method's specializations in the order a call of the loaded program tries them (the first
    trace, then the later ones oldest first, as the file stores them), with the guard that made each."""
    later: dict = {}
    for s in program.specializations:
        later.setdefault(s.method, []).append(s)
    if not later:
        return []
    out = ["", "specializations (a call runs the first whose guards hold; see docs/FORMAT.md):"]
    for method in (m for m in program.entry_points if m in later):
        specs = later[method]
        out.append(f"  1. {signature(method, program.graph(method))}")
        out.append("     traced from the example inputs")
        for k, spec in enumerate(specs, 2):
            out.append(f"  {k}. {signature(method, spec.graph)}")
            out.append(f"     made because {spec.reason}")
    return out


def _tensor_lines(program, methods) -> list:
    rows = tensor_rows(program)
    out = ["", "parameters and buffers:"]
    if rows:
        shown = [[r[0] + (f" (= {', '.join(r[5])})" if r[5] else ""), r[1], r[2], r[3], r[4]] for r in rows]
        out += table(shown, ["name", "kind", "shape", "dtype", "bytes"], "<<<<>")
        total = sum(r[4] for r in rows)
        n_params = sum(1 for r in rows if r[1] == "param")
        out.append(f"  total: {plural(len(rows), 'tensor')} ({plural(n_params, 'parameter')}, "
                   f"{plural(len(rows) - n_params, 'buffer')}), {total} bytes ({human(total)})")
    else:
        out.append("  (none)")
    n_const = sum(len(graph.constants) for _, _, _, graph in methods)
    if n_const:
        cbytes = sum(t.numel() * t.element_size() for _, _, _, graph in methods for t in graph.constants)
        out.append(f"  constants captured by the trace: {n_const} tensors, {cbytes} bytes")
    return out
