"""``tracejit migrate OLD.pt -o NEW.tjit --input SPEC ...``: the command line form of ``migrate``.

``register(sub, input_type, error)`` adds the subcommand to the ``tracejit`` parser; the parser
module passes its input-spec parser and its one-line error class, so this module imports none
of the CLI's internals.
"""
from __future__ import annotations

import argparse
import os

import torch

from ..porting import save
from . import migrate as migrate_archive
from . import archive_methods
from .errors import MigrationError

HELP = ("Convert a TorchScript archive made by torch.jit.trace (a .pt file) into a tracejit file. Loading the "
        "archive runs its TorchScript code: only migrate files you trust. TorchScript keeps no tensor shapes, so "
        "give random example inputs shaped like the ones the model was traced with (--input, one per forward "
        "argument); the migrated program is checked against the archive on them. The result needs no "
        "TorchScript.")


def register(sub, input_type, error, check_file=None) -> None:
    p = sub.add_parser("migrate", help="convert a torch.jit.trace archive (.pt) into a tracejit file",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="example:\n  tracejit migrate old.pt -o new.tjit --input 'float32[1,3,224,224]'")
    p.add_argument("file", metavar="OLD.pt", help="a TorchScript archive saved by torch.jit.save")
    p.add_argument("--output", "-o", required=True, metavar="FILE", help="where to write the tracejit program")
    p.add_argument("--input", "-i", dest="groups", metavar="SPEC", action=_InputAction, type=input_type,
                   help="DTYPE[D0,D1,...] of one argument of forward (or of the method named by the --method "
                        "before it), e.g. 'float32[1,3,224,224]' or 'int64[1,8]'; repeat for each argument")
    p.add_argument("--method", "-m", dest="groups", metavar="NAME", action=_MethodAction,
                   help="an archive made by torch.jit.trace_module holds several traced methods: every one is "
                        "migrated, each with its own inputs; --method NAME starts the --input list of NAME. "
                        "Naming some methods keeps only those")
    p.add_argument("--seed", type=int, default=0, help="random seed for the example inputs (default 0)")
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    p.set_defaults(func=lambda args: run(args, error, check_file), groups=None, methods_named=False)


class _InputAction(argparse.Action):
    """``--input SPEC``: appended to the inputs of the last ``--method`` (forward before any)."""

    def __call__(self, parser, namespace, value, option_string=None):
        groups = namespace.groups or {}
        if not groups:
            groups["forward"] = []
        groups[list(groups)[-1]].append(value)
        namespace.groups = groups


class _MethodAction(argparse.Action):
    """``--method NAME``: the --input options after it are NAME's arguments."""

    def __call__(self, parser, namespace, value, option_string=None):
        groups = namespace.groups or {}
        if value in groups and groups[value]:
            parser.error(f"--method {value} is given twice")
        groups.pop("forward", None) if groups.get("forward") == [] else None
        groups[value] = []
        namespace.groups = groups
        namespace.methods_named = True


def run(args, error, check_file=None) -> int:
    if check_file is not None:
        check_file(args.file)   # one clear line for what is not an archive (cli/common.py)
    elif not os.path.isfile(args.file):
        raise error(f"{args.file}: no such file")
    groups = args.groups or {}
    if not any(groups.values()):
        raise error("give the example inputs with --input DTYPE[SHAPE] (one per forward argument): a TorchScript "
                    "archive does not record the shapes it was traced with", 2)
    gen = torch.Generator().manual_seed(args.seed)
    wanted = {name: tuple(spec.make(gen) for spec in specs) for name, specs in groups.items()}
    try:
        in_archive = archive_methods(args.file)
        left = [m for m in in_archive if m not in wanted]
        if left and not args.methods_named:   # never drop a traced method silently
            raise error(f"{args.file}: the archive holds the traced methods {', '.join(in_archive)}; give each "
                        f"its inputs with --method NAME --input SPEC ... (naming methods keeps only those)", 2)
        traced = migrate_archive(args.file, methods=wanted)
    except MigrationError as e:
        raise error(f"{args.file}: cannot migrate: {e}") from None
    try:
        save(traced, args.output)
    except OSError as e:
        raise error(f"cannot write {args.output}: {e.strerror or e}") from None
    n_nodes = sum(len(graph.nodes) for m in traced.modules() for graph in m.method_graphs.values())
    print(f"{args.output}: migrated {traced.original_name} from {args.file} "
          f"({sum(1 for _ in traced.modules())} modules, {n_nodes} ops; methods {', '.join(wanted)}"
          f"{'; left out ' + ', '.join(left) if left else ''}); it needs no TorchScript")
    return 0
