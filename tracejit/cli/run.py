"""``tracejit run FILE [--input SPEC ...] [--repeat N]``: load a saved program, call it on random
inputs, print its outputs' dtypes and shapes and the median call time."""
from __future__ import annotations

import argparse
import statistics
import time

from .common import CLIError, dtype_name, escape, load, shape_text
from .specs import DEBUG_HELP, DTYPE_NAMES, FORMATTER, INPUT_HELP, InputSpec, parse_input_spec, positive, wrap


def register(sub) -> None:
    rn = sub.add_parser(
        "run", formatter_class=FORMATTER, help="load a saved program and time it on random inputs",
        description=wrap("Load a saved program on the CPU, call it under torch.no_grad() on random inputs of "
                         "the given dtypes and shapes, print the dtype and shape of each output, and the median "
                         "time of a call over --repeat calls (after one untimed warm-up call)."),
        epilog="example:\n  tracejit run model.tjit --input 'float32[8,3,224,224]' --repeat 50")
    rn.add_argument("file", metavar="FILE", help="a program saved by tracejit.save or 'tracejit trace'")
    rn.add_argument("--input", "-i", dest="inputs", metavar="SPEC", action="append", type=parse_input_spec,
                    default=None, help=INPUT_HELP + " Without --input, the dtypes and shapes the program was "
                                                    "traced with are used.")
    rn.add_argument("--repeat", "-n", type=positive, default=20, metavar="N",
                    help="number of timed calls; the median is reported (default 20)")
    rn.add_argument("--seed", type=int, default=0, help="random seed for the inputs (default 0)")
    rn.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    rn.set_defaults(func=cmd_run)


def traced_specs(obj):
    """The input specs the root forward was traced with, or None when it takes other than plain tensors."""
    from ..ir import Value
    from ..runtime.traced import TracedFunction
    graph = obj.graph if isinstance(obj, TracedFunction) else obj._method("forward").graph
    args_spec, kwargs_spec = graph.in_spec.children
    if kwargs_spec.children or any(c.kind != "leaf" for c in args_spec.children):
        return None
    specs = []
    for leaf in graph.input_leaves:
        if not isinstance(leaf, Value) or not hasattr(leaf.type, "shape"):
            return None
        name = dtype_name(leaf.type.dtype)
        if name not in DTYPE_NAMES:
            return None
        specs.append(InputSpec(name, name, tuple(leaf.type.shape)))
    return specs


def _leaves(x, prefix="output"):
    import torch
    if isinstance(x, torch.Tensor):
        yield prefix, x
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, f"{prefix}[{k!r}]")
    elif isinstance(x, (tuple, list)):
        for i, v in enumerate(x):
            yield from _leaves(v, f"{prefix}[{i}]")
    else:
        yield prefix, x


def _cap_declared_inputs(path, specs) -> None:
    """Inputs made from the shapes a file declares count in its allocation budget (a 1 KB file may not
    make run allocate 4 GiB): at most serialize/limits.max_elements(file size) elements in all."""
    import math
    import os

    from ..serialize.limits import max_elements
    total = sum(math.prod(s.shape) for s in specs)
    cap = max_elements(os.path.getsize(path))
    if total > cap:
        raise CLIError(f"{path}: its forward was traced with inputs of {total} elements in all, more than run makes "
                       f"from a file's declared shapes ({cap}, a fixed multiple of the file's size); pass --input "
                       "to choose the inputs")


def cmd_run(args) -> int:
    import torch

    obj = load(args.file)
    specs = args.inputs
    if specs is None:
        specs = traced_specs(obj)
        if specs is None:
            raise CLIError(f"{args.file}: its forward was traced with nested or non-tensor arguments, which "
                           "--input cannot describe")
        _cap_declared_inputs(args.file, specs)
    g = torch.Generator().manual_seed(args.seed)
    inputs = tuple(s.make(g) for s in specs)
    label = ", ".join(repr(s) for s in specs) or "no inputs"
    try:
        with torch.no_grad():
            out = obj(*inputs)   # warm-up; its output is reported
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                obj(*inputs)
                times.append(time.perf_counter() - t0)
    except (TypeError, ValueError, RuntimeError) as e:
        first = (str(e).strip().splitlines() or [""])[0]
        raise CLIError(f"running {args.file} on {label} failed: {first}") from None
    print(escape(f"ran {args.file} on {label}"))
    for name, leaf in _leaves(out):
        if isinstance(leaf, torch.Tensor):
            print(escape(f"  {name}: {dtype_name(leaf.dtype)}{shape_text(leaf.shape)}"))
        else:
            print(escape(f"  {name}: {type(leaf).__name__} {leaf!r:.60}"))
    med = statistics.median(times)
    print(f"  median call time: {med * 1e3:.3f} ms over {args.repeat} calls "
          f"(min {min(times) * 1e3:.3f} ms, max {max(times) * 1e3:.3f} ms)")
    return 0
