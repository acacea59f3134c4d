"""The ``tracejit`` parser and entry point: the subcommands register themselves from their modules
(inspect.py, trace.py, run.py, export.py, migrate.py, view.py: verbs.py's table, each imported only when a
command line names it); ``main`` turns every error into one line."""
from __future__ import annotations

import argparse
import os
import sys
import warnings

from ..escape import terminal
from ..gc_pause import collector_paused
from ..version import __version__
from .common import PROG, CLIError, fail
from .specs import DEBUG_HELP, FORMATTER, Parser
from .verbs import VERBS, named_verb, verb_module


def build_parser(verbs=None) -> argparse.ArgumentParser:
    """The ``tracejit`` parser. ``verbs``: the verbs whose modules are imported and whose parsers are built
    (None: all); the others are listed with their help line only (verbs.py)."""
    p = Parser(prog=PROG, formatter_class=FORMATTER,
               description="Inspect, trace and run tracejit programs (files saved by tracejit.save).",
               epilog="examples:\n"
                      "  tracejit trace models:small --input 'float32[2,16]' -o small.tjit\n"
                      "  tracejit inspect small.tjit --graph\n"
                      "  tracejit run small.tjit --input 'float32[8,16]' --repeat 50\n\n"
                      "Run 'tracejit COMMAND --help' for a command's options.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    sub.required = True
    for verb, (_, help_line) in VERBS.items():
        if verbs is None or verb in verbs:
            verb_module(verb).register(sub)
        else:
            sub.add_parser(verb, help=help_line)
    return p


def main(argv=None) -> int:
    """Entry point of the ``tracejit`` console script and ``python -m tracejit``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    verb = named_verb(argv)
    try:
        parser = build_parser([verb] if verb else [])
    except ImportError as e:   # a verb's optional dependency (export: the onnx extra)
        fail(f"tracejit {verb} cannot start: {e}", 1)
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.showwarning = _escaped_warning   # a warning's text may quote a file's strings
        return _dispatch(args)


def _escaped_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` with the message and file name escaped for the terminal (one line each;
    the source line Python adds is generated code or the user's own)."""
    text = warnings.formatwarning(terminal(str(message)), category, terminal(str(filename)), lineno, line)
    stream = sys.stderr if file is None else file
    try:
        stream.write(terminal(text, keep_newlines=True))
    except (OSError, ValueError):   # a closed stream: warnings are best effort, as Python's own
        pass


# verbs that only read a file and describe or convert it: they build many small acyclic objects
# (JSON, graphs, the viewer's document), so the cyclic collector's full passes made them superlinear in
# the file's size (view of 19,200 symbolic sizes: 0.7 of 2.0 s); reference counting frees them
DESCRIBE_ONLY = ("inspect", "view", "export")


def _dispatch(args) -> int:
    try:
        if args.command in DESCRIBE_ONLY:
            with collector_paused():
                return args.func(args) or 0
        return args.func(args) or 0
    except CLIError as e:
        if args.debug:
            raise
        fail(str(e), e.code)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except BrokenPipeError:   # `tracejit inspect big.tjit | head`: the reader left; stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as e:  # a bug, or an error without a better message: still one line
        if args.debug:
            raise
        fail(f"{type(e).__name__}: {e}", 1)
    return 0
