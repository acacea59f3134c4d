"""``tracejit view``: the subcommand lives with the viewer (tracejit/viewer/cli.py); this hook hands
it the CLI's error class."""
from __future__ import annotations

from .common import CLIError


def register(sub) -> None:
    from ..viewer import cli as viewer_cli
    viewer_cli.register(sub, CLIError)
