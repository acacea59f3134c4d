"""``tracejit migrate``: the subcommand lives with the migration code (tracejit/migrate/cli.py);
this hook hands it the CLI's input-spec parser and error class."""
from __future__ import annotations

from .common import CLIError, check_archive_file
from .specs import parse_input_spec
from ..migrate import cli as migrate_cli


def register(sub) -> None:
    migrate_cli.register(sub, parse_input_spec, CLIError, check_archive_file)
