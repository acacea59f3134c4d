"""``tracejit view``: the subcommand lives with the viewer (tracejit/viewer/cli.py); this hook hands
it the CLI's error class and adds ``--netron`` (cli/netron.py)."""
from __future__ import annotations

from .common import CLIError, check_program_file


def register(sub) -> None:
    from ..viewer import cli as viewer_cli
    viewer_cli.register(sub, CLIError, check_program_file)
    from .netron import add_to
    add_to(sub.choices["view"])
