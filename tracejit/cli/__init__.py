"""The ``tracejit`` command line: inspect, trace and run saved programs.

    tracejit inspect FILE [--graph] [--code]
    tracejit trace MODULE:CALLABLE --input 'float32[1,3,224,224]' [--input ...] -o FILE
    tracejit run FILE [--input ...] [--repeat N]
    tracejit export FILE -o FILE.onnx [--opset N] [--triton DIR]   (cli/export.py)
    tracejit migrate OLD.pt -o NEW.tjit --input ...      (tracejit/migrate/cli.py)
    tracejit view FILE -o FILE.html | --netron           (tracejit/viewer/cli.py, cli/netron.py)

Also available as ``python -m tracejit``. One module per command; specs.py parses arguments,
common.py holds the shared error and printing helpers, app.py the parser and ``main``.

The parser is argparse: stdlib, subcommands, complete --help, no dependency.

Errors print one line, ``tracejit: error: ...``, to stderr and exit with 2 for a
usage error (a bad option, a bad input spec) and 1 for anything else (a missing
or damaged file, a factory that does not import, a trace that fails); ``--debug``
shows the traceback instead. ``inspect`` never runs the model: it reads the file's
header and loads the program on the meta device (no tensor is materialized, nothing
runs).
"""
from __future__ import annotations

from .app import build_parser, main
from .common import CLIError
from .specs import InputSpec, parse_input_spec

__all__ = ["main", "build_parser", "CLIError", "InputSpec", "parse_input_spec"]
