"""``tracejit view FILE --netron [-o FILE.onnx]``: the program as an ONNX model whose nodes carry
their source line and ledger entries in their doc strings (tracejit/export/annotate.py), opened
in Netron when the ``netron`` package is installed (tracejit never installs it)."""
from __future__ import annotations

import os

from .common import escape, read_program
from .export import export_quietly

NETRON_HINT = "pip install netron"


def cmd_netron(args) -> int:
    program = read_program(args.file, map_location="cpu")   # the file's Program: nothing compiled (export_onnx takes it)
    out = args.output or os.path.splitext(args.file)[0] + ".onnx"
    proto, notes = export_quietly(program, args.file, out, doc_strings=True)
    print(f"{escape(out)}: ONNX model of {escape(args.file)}, {len(proto.graph.node)} nodes, each with its source "
          "line and ledger entries in its doc string")
    for note in notes:
        print(f"note: {escape(note)}")
    try:
        import netron   # optional dependency, never installed by tracejit (NETRON_HINT)
    except ImportError:
        print(f"netron is not installed: {NETRON_HINT}, then `netron {escape(out)}` (or open the file in the "
              "Netron app)")
        return 0
    address = netron.start(out)
    print(f"serving {escape(out)} in Netron at {_url(address)}; Ctrl+C to stop")
    wait = getattr(netron, "wait", None)
    try:
        if wait is not None:
            wait()
    except KeyboardInterrupt:
        pass
    return 0


def _url(address) -> str:
    if isinstance(address, tuple) and len(address) == 2:
        return f"http://{address[0]}:{address[1]}"
    return str(address)
