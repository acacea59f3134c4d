"""``tracejit trace MODULE:CALLABLE --input SPEC ... -o FILE``: build a module with a factory,
trace it on random inputs (check_trace on), save it and print a summary. ``tracejit trace --hf
PATH_OR_ID -o FILE`` traces a transformers model instead (hf.py)."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

import torch
from torch import nn

from ..api import trace
from ..errors import TracerWarning, TracingCheckError
from . import hf
from .common import CLIError, human, save_program, ledger_source, methods_of, op_histogram, plural, tensor_rows
from .specs import DEBUG_HELP, FORMATTER, INPUT_HELP, factory_ref, parse_input_spec, wrap
from ..runtime.traced import program_of   # the summary reads the trace's Program (tracejit/program.py)


def register(sub) -> None:
    tr = sub.add_parser(
        "trace", formatter_class=FORMATTER, help="trace a module built by a factory and save it",
        description=wrap("Import MODULE (the current directory is on the import path), call CALLABLE with no "
                         "arguments to build an nn.Module, put it in eval mode, trace it under torch.no_grad() on "
                         "random inputs of the given dtypes and shapes (check_trace on: the trace is re-run and "
                         "compared with eager), save it to FILE, and print a summary (file, size, parameters, ops, "
                         "ledger)."),
        epilog="example:\n"
               "  # models.py defines: def small(): return nn.Sequential(nn.Linear(16, 4), nn.ReLU())\n"
               "  tracejit trace models:small --input 'float32[2,16]' -o small.tjit\n"
               "  tracejit trace torchvision.models:resnet18 --input 'float32[1,3,224,224]' -o resnet18.tjit\n"
               "  tracejit trace --hf ./my-bert -o bert.tjit            # a transformers model saved locally\n"
               "  tracejit trace --hf ./my-gpt2 --task causal-lm --batch 1 --length 16 -o gpt2.tjit")
    tr.add_argument("factory", metavar="MODULE:CALLABLE", type=factory_ref, nargs="?",
                    help="a function or class (dotted names allowed after ':') that returns an nn.Module when "
                         "called with no arguments")
    tr.add_argument("--input", "-i", dest="inputs", metavar="SPEC", action="append", type=parse_input_spec,
                    default=[], help=INPUT_HELP)
    tr.add_argument("--output", "-o", required=True, metavar="FILE",
                    help="where to save the traced program (written atomically)")
    tr.add_argument("--seed", type=int, default=0, help="random seed for the factory and the inputs (default 0)")
    tr.add_argument("--no-strict", dest="strict", action="store_false",
                    help="trace with strict=False: the model may return dicts and lists (in strict mode, only "
                         "tensors and tuples of them); --hf always traces this way")
    tr.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    hf.add_arguments(tr)
    tr.set_defaults(func=cmd_trace)


def import_factory(ref: str):
    """The callable ``MODULE:CALLABLE`` names, imported with the current directory on the path."""
    module_name, _, attr = ref.partition(":")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise CLIError(f"cannot import {module_name!r} (for {ref}): no module named {e.name!r} in the "
                           f"current directory ({cwd}) or on the Python path") from None
        raise CLIError(f"cannot import {module_name!r} (for {ref}): {e}") from None
    except BaseException as e:  # a syntax error or an exception raised while importing the user's module
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise CLIError(f"cannot import {module_name!r} (for {ref}): {type(e).__name__}: {e}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CLIError(f"{ref}: {getattr(obj, '__name__', module_name)!r} has no attribute {part!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise CLIError(f"{ref}: is a {type(obj).__name__}, not a callable that returns an nn.Module")
    return obj


def cmd_trace(args) -> int:
    if args.hf is not None:
        if args.factory is not None or args.inputs:
            raise CLIError("--hf builds the model and its inputs itself: give no MODULE:CALLABLE and no --input "
                           "with it", 2)
        return hf.cmd_trace_hf(args)
    hf.check_hf_only(args)
    if args.factory is None:
        raise CLIError("give a MODULE:CALLABLE that builds the model (or --hf PATH_OR_ID for a transformers model)",
                       2)
    factory = import_factory(args.factory)
    torch.manual_seed(args.seed)
    try:
        model = factory()
    except Exception as e:
        raise CLIError(f"{args.factory}() failed: {type(e).__name__}: {e}") from None
    if not isinstance(model, nn.Module):
        raise CLIError(f"{args.factory}() returned a {type(model).__name__}, not an nn.Module")
    model.eval()
    g = torch.Generator().manual_seed(args.seed)
    inputs = tuple(s.make(g) for s in args.inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TracerWarning)   # every one is in the ledger, shown below
        try:
            with torch.no_grad():
                traced = trace(model, inputs, check_trace=True, strict=args.strict)
        except TracingCheckError as e:
            raise CLIError(f"the trace check failed: {str(e).strip().splitlines()[0]}") from None
        except Exception as e:
            first = (str(e).strip().splitlines() or [""])[0]
            if args.strict and "strict=False" in first:
                first += " (on the command line: --no-strict)"
            raise CLIError(f"tracing {args.factory} failed: {type(e).__name__}: {first}") from None
    save_program(traced, args.output)
    _summary(args, traced)
    return 0


def _summary(args, traced) -> None:
    size = os.path.getsize(args.output)
    program = program_of(traced)
    rows = tensor_rows(program)
    numel = sum(t.numel() for t in {id(t): t for t in traced.parameters()}.values())
    hist = op_histogram(program)
    n_graphs = len(methods_of(program))
    aten = sum(c for op, c in hist.items() if op.startswith("aten::"))
    ledger = traced.ledger
    print(f"traced {args.factory} ({traced.original_name}) on "
          f"{', '.join(repr(s) for s in args.inputs) or 'no inputs'}")
    print(f"  file:       {args.output} ({size} bytes, {human(size)})")
    print(f"  parameters: {numel} in {plural(sum(1 for r in rows if r[1] == 'param'), 'tensor')} "
          f"(+{plural(sum(1 for r in rows if r[1] == 'buffer'), 'buffer')})")
    print(f"  ops:        {sum(hist.values())} nodes in {n_graphs} graph(s), {aten} aten ops")
    print(f"  ledger:     {plural(len(ledger), 'entry', 'entries')}")
    for e in ledger:
        print(f"    {e.kind:<12} {ledger_source(e)}  {' '.join(str(e.message).split())}")
