"""``tracejit view FILE -o FILE.html``: the command line form of ``tracejit.view``.

``register(sub, error)`` adds the subcommand to the ``tracejit`` parser.
"""
from __future__ import annotations

import argparse
import os

from ..errors import LoadError
from ..escape import terminal
from . import view


def register(sub, error, check_file=None) -> None:
    p = sub.add_parser("view", help="write an interactive HTML view of a saved program's graph",
                       description="Write one self-contained HTML file (no network needed to view it) showing the "
                                   "program's graphs: submodule calls as collapsible groups, each op with its "
                                   "output dtype and shape and source line, the ledger highlighted, a search box. "
                                   "The program is loaded on the meta device: nothing runs.",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="example:\n  tracejit view model.tjit -o model.html")
    p.add_argument("file", metavar="FILE", help="a program saved by tracejit.save or 'tracejit trace'")
    p.add_argument("--output", "-o", metavar="HTML", help="where to write the page (default: FILE with .html)")
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    p.set_defaults(func=lambda args: run(args, error, check_file))


def run(args, error, check_file=None) -> int:
    if check_file is not None:
        check_file(args.file)   # one clear line for what is not a program (cli/common.py)
    elif not os.path.isfile(args.file):
        raise error(f"{args.file}: no such file")
    out = args.output or os.path.splitext(args.file)[0] + ".html"
    try:
        view(args.file, out)
    except LoadError as e:
        raise error(f"{args.file}: cannot load: {e}") from None
    except OSError as e:
        raise error(f"cannot write {out}: {e.strerror or e}") from None
    print(terminal(f"{out}: graph view of {args.file} (open it in a browser; it needs no network)"))
    return 0
