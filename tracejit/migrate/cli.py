"""``tracejit migrate OLD.pt -o NEW.tjit --input SPEC ...``: the command line form of ``migrate``.

``register(sub, input_type, error)`` adds the subcommand to the ``tracejit`` parser; the parser
module passes its input-spec parser and its one-line error class, so this module imports none
of the CLI's internals.
"""
from __future__ import annotations

import argparse

HELP = ("Convert a TorchScript archive made by torch.jit.trace (a .pt file) into a tracejit file. Loading the "
        "archive runs its TorchScript code: only migrate files you trust. TorchScript keeps no tensor shapes, so "
        "give random example inputs shaped like the ones the model was traced with (--input, one per forward "
        "argument); the migrated program is checked against the archive on them. The result needs no "
        "TorchScript.")


def register(sub, input_type, error) -> None:
    p = sub.add_parser("migrate", help="convert a torch.jit.trace archive (.pt) into a tracejit file",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="example:\n  tracejit migrate old.pt -o new.tjit --input 'float32[1,3,224,224]'")
    p.add_argument("file", metavar="OLD.pt", help="a TorchScript archive saved by torch.jit.save")
    p.add_argument("--output", "-o", required=True, metavar="FILE", help="where to write the tracejit program")
    p.add_argument("--input", "-i", dest="inputs", metavar="SPEC", action="append", type=input_type, default=[],
                   help="DTYPE[D0,D1,...] of one forward argument, e.g. 'float32[1,3,224,224]' or 'int64[1,8]'; "
                        "repeat for each argument")
    p.add_argument("--seed", type=int, default=0, help="random seed for the example inputs (default 0)")
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    p.set_defaults(func=lambda args: run(args, error))


def run(args, error) -> int:
    import os

    import torch

    import tracejit
    from .errors import MigrationError

    if not os.path.isfile(args.file):
        raise error(f"{args.file}: no such file")
    if not args.inputs:
        raise error("give the example inputs with --input DTYPE[SHAPE] (one per forward argument): a TorchScript "
                    "archive does not record the shapes it was traced with", 2)
    gen = torch.Generator().manual_seed(args.seed)
    inputs = tuple(spec.make(gen) for spec in args.inputs)
    try:
        traced = tracejit.migrate(args.file, inputs)
    except MigrationError as e:
        raise error(f"{args.file}: cannot migrate: {e}") from None
    try:
        tracejit.save(traced, args.output)
    except OSError as e:
        raise error(f"cannot write {args.output}: {e.strerror or e}") from None
    n_nodes = sum(len(fn.graph.nodes) for m in traced.modules() for fn in m._traced_methods.values())
    print(f"{args.output}: migrated {traced.original_name} from {args.file} "
          f"({sum(1 for _ in traced.modules())} modules, {n_nodes} ops); it needs no TorchScript")
    return 0
