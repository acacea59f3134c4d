"""``tracejit view``: the subcommand lives with the viewer (tracejit/viewer/cli.py); this hook hands
it the CLI's error class and adds ``--netron``, whose runner (cli/netron.py: the ONNX exporter, the onnx
extra) is imported only when the flag is given."""
from __future__ import annotations

from ..lazy_module import LazyModule
from ..viewer import cli as viewer_cli
from .common import CLIError, check_program_file

_netron = LazyModule(".netron", __package__)   # the ONNX exporter (the onnx extra): only for --netron


def register(sub) -> None:
    viewer_cli.register(sub, CLIError, check_program_file)
    add_netron(sub.choices["view"])


def add_netron(parser) -> None:
    """Add ``--netron`` to the ``view`` subcommand's ``parser``; the HTML view stays the default."""
    parser.add_argument("--netron", action="store_true",
                        help="write an ONNX model (-o, default FILE with .onnx) whose nodes name their source line "
                             "and ledger entries, and open it in Netron if the netron package is installed")
    html_view = parser.get_default("func")
    parser.set_defaults(func=lambda args: _netron.cmd_netron(args) if args.netron else html_view(args))
