"""``tracejit run FILE [--input SPEC ...] [--repeat N]``: load a saved program, call it on random
inputs, print its outputs' dtypes and shapes and the median call time."""
from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Mapping

import torch

from .common import CLIError, dtype_name, escape, load, shape_text
from ..ir import Value
from ..pytree import unflatten
from ..runtime.traced import program_of   # run holds the loaded object; its Program gives the traced inputs
from ..serialize.limits import max_elements
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
                                                    "traced with are used, for keyword and nested arguments too "
                                                    "(integers then 0 or 1: valid ids and masks).")
    rn.add_argument("--repeat", "-n", type=positive, default=20, metavar="N",
                    help="number of timed calls; the median is reported (default 20)")
    rn.add_argument("--seed", type=int, default=0, help="random seed for the inputs (default 0)")
    rn.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    rn.set_defaults(func=cmd_run)


# integer inputs made from the traced types are 0 or 1: valid token ids, masks and token type ids of any model
DEFAULT_INT_HIGH = 2


def traced_inputs(obj, generator, path=None):
    """``(args, kwargs, label)``: random inputs of the dtypes and shapes the root forward was traced with,
    positional, keyword and nested alike (constants as traced); None when a leaf is not a tensor type
    ``--input`` knows."""
    graph = program_of(obj).graph("forward")
    if path is not None:   # a file's declared shapes count in its allocation budget
        _cap_declared_inputs(path, [InputSpec(dtype_name(v.type.dtype), dtype_name(v.type.dtype),
                                              tuple(int(d) for d in v.type.shape))
                                    for v in graph.input_leaves if isinstance(v, Value) and hasattr(v.type, "shape")])
    leaves, texts = [], []
    for leaf in graph.input_leaves:
        if not isinstance(leaf, Value):
            leaves.append(leaf)
            texts.append(repr(leaf))
            continue
        if not hasattr(leaf.type, "shape") or dtype_name(leaf.type.dtype) not in DTYPE_NAMES:
            return None
        name = dtype_name(leaf.type.dtype)
        spec = InputSpec(name, name, tuple(int(d) for d in leaf.type.shape))
        leaves.append(spec.make(generator, int_high=DEFAULT_INT_HIGH))
        texts.append(repr(spec))
    args, kwargs = unflatten(graph.in_spec, leaves)
    args_spec, kwargs_spec = graph.in_spec.children
    it = iter(texts)
    parts = [c.describe(it) for c in args_spec.children]
    parts += [f"{k}={c.describe(it)}" for k, c in zip(kwargs_spec.keys, kwargs_spec.children)]
    return tuple(args), dict(kwargs), ", ".join(parts) or "no inputs"


def _leaves(x, prefix="output"):
    if isinstance(x, torch.Tensor):
        yield prefix, x
    elif isinstance(x, Mapping):   # dicts, ModelOutputs, records
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
    total = sum(math.prod(s.shape) for s in specs)
    cap = max_elements(os.path.getsize(path))
    if total > cap:
        raise CLIError(f"{path}: its forward was traced with inputs of {total} elements in all, more than run makes "
                       f"from a file's declared shapes ({cap}, a fixed multiple of the file's size); pass --input "
                       "to choose the inputs")


def cmd_run(args) -> int:
    obj = load(args.file)
    g = torch.Generator().manual_seed(args.seed)
    if args.inputs is not None:
        inputs, kw_inputs = tuple(s.make(g) for s in args.inputs), {}
        label = ", ".join(repr(s) for s in args.inputs) or "no inputs"
    else:
        made = traced_inputs(obj, g, args.file)
        if made is None:
            raise CLIError(f"{args.file}: its forward was traced with an argument of a type --input cannot "
                           f"describe (dtypes: {', '.join(DTYPE_NAMES)}); give its inputs with --input")
        inputs, kw_inputs, label = made
    try:
        with torch.no_grad():
            out = obj(*inputs, **kw_inputs)   # warm-up; its output is reported
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                obj(*inputs, **kw_inputs)
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
