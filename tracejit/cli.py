"""The ``tracejit`` command line: inspect, trace and run saved programs.

    tracejit inspect FILE [--graph] [--code]
    tracejit trace MODULE:CALLABLE --input 'float32[1,3,224,224]' [--input ...] -o FILE
    tracejit run FILE [--input ...] [--repeat N]

Also available as ``python -m tracejit``.

The parser is argparse: stdlib, subcommands, complete --help, no dependency.

Errors print one line, ``tracejit: error: ...``, to stderr and exit with 2 for a
usage error (a bad option, a bad input spec) and 1 for anything else (a missing
or damaged file, a factory that does not import, a trace that fails); ``--debug``
shows the traceback instead. ``inspect`` never runs the model: it reads the file's
header and loads the program on the meta device (no tensor is materialized, nothing
runs).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import re
import shutil
import statistics
import struct
import sys
import textwrap
import time
import warnings
from collections import Counter

PROG = "tracejit"

# dtype names accepted in an input spec
_DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "bool")
_SPEC_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\[([^\]]*)\]\s*$")
# TorchScript-style type names for signatures: Float[2, 3, 32, 32]
_TYPE_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
               "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
               "bool": "Bool", "complex64": "ComplexFloat", "complex128": "ComplexDouble"}


class CLIError(Exception):
    """A failure to report as one ``tracejit: error:`` line; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


# ============================================================================== parsing
class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors as one line: ``tracejit: error: ...`` and exit status 2."""

    def error(self, message):  # noqa: D401 - argparse's hook
        hint = f"; see '{self.prog} --help'"
        _fail(f"{message}{hint}", 2)


def _fail(message: str, code: int):
    line = _escape(" ".join(str(message).split()))  # one line, whatever the message held
    sys.stderr.write(f"{PROG}: error: {line}\n")
    sys.exit(code)


def _escape(text: str, keep_newlines: bool = False) -> str:
    """``text`` with every control or format character (terminal escapes, bidi overrides) shown
    as a Python escape, so nothing read from a file can drive the terminal."""
    out = []
    for c in str(text):
        if (c == "\n" and keep_newlines) or c.isprintable() and not _FORMAT_CHAR(c):
            out.append(c)
        else:
            out.append(ascii(c)[1:-1])
    return "".join(out)


def _FORMAT_CHAR(c: str) -> bool:
    import unicodedata
    return unicodedata.category(c) in ("Cf", "Zl", "Zp")


class InputSpec:
    """``float32[1,3,224,224]``: a dtype and a shape."""

    def __init__(self, text: str, dtype_name: str, shape: tuple):
        self.text, self.dtype_name, self.shape = text, dtype_name, shape

    @property
    def dtype(self):
        import torch
        return getattr(torch, self.dtype_name)

    def make(self, generator=None):
        import torch
        d = self.dtype
        if d.is_floating_point:
            return torch.randn(self.shape, dtype=d, generator=generator)
        if d == torch.bool:
            return torch.randint(0, 2, self.shape, generator=generator).bool()
        return torch.randint(0, 10, self.shape, dtype=d, generator=generator)

    def __repr__(self):
        return f"{self.dtype_name}[{', '.join(map(str, self.shape))}]"


def parse_input_spec(text: str) -> InputSpec:
    """argparse type for --input: ``DTYPE[D0,D1,...]`` (``float32[]`` is a 0-d tensor)."""
    m = _SPEC_RE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"bad input spec {text!r}: expected DTYPE[D0,D1,...], e.g. 'float32[1,3,224,224]'")
    name, dims = m.group(1), m.group(2).strip()
    if name not in _DTYPE_NAMES:
        raise argparse.ArgumentTypeError(
            f"bad input spec {text!r}: unknown dtype {name!r} (one of {', '.join(_DTYPE_NAMES)})")
    shape = []
    if dims:
        for d in dims.split(","):
            d = d.strip()
            if not d.isdigit():
                raise argparse.ArgumentTypeError(
                    f"bad input spec {text!r}: dimension {d!r} is not a non-negative integer")
            shape.append(int(d))
    return InputSpec(text, name, tuple(shape))


def _factory_ref(text: str) -> str:
    module, sep, attr = text.partition(":")
    if module.endswith(".py"):
        raise argparse.ArgumentTypeError(f"bad factory {text!r}: name the module, not its file "
                                         f"(e.g. '{module[:-3].replace(os.sep, '.')}:{attr or 'CALLABLE'}')")
    ok = sep and all(p.isidentifier() for p in module.split(".")) and all(p.isidentifier() for p in attr.split("."))
    if not ok:
        raise argparse.ArgumentTypeError(f"bad factory {text!r}: expected MODULE:CALLABLE, e.g. 'models:resnet18' "
                                         "(MODULE is imported from the current directory)")
    return text


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


_INPUT_HELP = ("an input tensor as DTYPE[D0,D1,...], e.g. 'float32[1,3,224,224]'; repeat for each positional "
               f"argument, in order. DTYPE is one of {', '.join(_DTYPE_NAMES)}. Float inputs are drawn with "
               "torch.randn, integer inputs with torch.randint(0, 10), bool inputs at random. Quote it in the "
               "shell.")


def _wrap(text: str) -> str:
    return textwrap.fill(" ".join(text.split()), width=min(100, shutil.get_terminal_size().columns - 2))


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    fmt = argparse.RawDescriptionHelpFormatter
    debug_help = "on an error, show the full Python traceback instead of one line"
    p = _Parser(prog=PROG, formatter_class=fmt,
                description="Inspect, trace and run tracejit programs (files saved by tracejit.save).",
                epilog="examples:\n"
                       "  tracejit trace models:small --input 'float32[2,16]' -o small.tjit\n"
                       "  tracejit inspect small.tjit --graph\n"
                       "  tracejit run small.tjit --input 'float32[8,16]' --repeat 50\n\n"
                       "Run 'tracejit COMMAND --help' for a command's options.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--debug", action="store_true", help=debug_help)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    sub.required = True

    ins = sub.add_parser(
        "inspect", formatter_class=fmt, help="describe a saved program without running it",
        description=_wrap("Describe a saved tracejit program without running it: the traced methods of the root and "
                          "their input signatures; the parameters and buffers (name, shape, dtype, bytes) with totals "
                          "(a tensor shared by several names counted once); the ledger (what the trace froze: kind, "
                          "source line, message); a histogram of the ops over all graphs; the file's SHA-256 (first 16 "
                          "hex digits) and its stored CRC32. The program is loaded on the meta device: the file's "
                          "checksum and graphs are validated, no tensor is materialized and the model never runs."),
        epilog="example:\n  tracejit inspect model.tjit --graph --code")
    ins.add_argument("file", metavar="FILE", help="a program saved by tracejit.save or 'tracejit trace'")
    ins.add_argument("--graph", action="store_true",
                     help="also print the IR graph of every traced method (root and submodules)")
    ins.add_argument("--code", action="store_true",
                     help="also print the generated Python code of every traced method (root and submodules)")
    ins.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
    ins.set_defaults(func=cmd_inspect)

    tr = sub.add_parser(
        "trace", formatter_class=fmt, help="trace a module built by a factory and save it",
        description=_wrap("Import MODULE (the current directory is on the import path), call CALLABLE with no "
                          "arguments to build an nn.Module, put it in eval mode, trace it under torch.no_grad() on "
                          "random inputs of the given dtypes and shapes (check_trace on: the trace is re-run and "
                          "compared with eager), save it to FILE, and print a summary (file, size, parameters, ops, "
                          "ledger)."),
        epilog="example:\n"
               "  # models.py defines: def small(): return nn.Sequential(nn.Linear(16, 4), nn.ReLU())\n"
               "  tracejit trace models:small --input 'float32[2,16]' -o small.tjit\n"
               "  tracejit trace torchvision.models:resnet18 --input 'float32[1,3,224,224]' -o resnet18.tjit")
    tr.add_argument("factory", metavar="MODULE:CALLABLE", type=_factory_ref,
                    help="a function or class (dotted names allowed after ':') that returns an nn.Module when "
                         "called with no arguments")
    tr.add_argument("--input", "-i", dest="inputs", metavar="SPEC", action="append", type=parse_input_spec,
                    default=[], help=_INPUT_HELP)
    tr.add_argument("--output", "-o", required=True, metavar="FILE",
                    help="where to save the traced program (written atomically)")
    tr.add_argument("--seed", type=int, default=0, help="random seed for the factory and the inputs (default 0)")
    tr.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
    tr.set_defaults(func=cmd_trace)

    rn = sub.add_parser(
        "run", formatter_class=fmt, help="load a saved program and time it on random inputs",
        description=_wrap("Load a saved program on the CPU, call it under torch.no_grad() on random inputs of "
                          "the given dtypes and shapes, print the dtype and shape of each output, and the median "
                          "time of a call over --repeat calls (after one untimed warm-up call)."),
        epilog="example:\n  tracejit run model.tjit --input 'float32[8,3,224,224]' --repeat 50")
    rn.add_argument("file", metavar="FILE", help="a program saved by tracejit.save or 'tracejit trace'")
    rn.add_argument("--input", "-i", dest="inputs", metavar="SPEC", action="append", type=parse_input_spec,
                    default=None, help=_INPUT_HELP + " Without --input, the dtypes and shapes the program was "
                                                     "traced with are used.")
    rn.add_argument("--repeat", "-n", type=_positive, default=20, metavar="N",
                    help="number of timed calls; the median is reported (default 20)")
    rn.add_argument("--seed", type=int, default=0, help="random seed for the inputs (default 0)")
    rn.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
    rn.set_defaults(func=cmd_run)
    from .migrate import cli as migrate_cli   # `tracejit migrate`: tracejit/migrate/cli.py
    migrate_cli.register(sub, parse_input_spec, CLIError)
    from .viewer import cli as viewer_cli     # `tracejit view`: tracejit/viewer/cli.py
    viewer_cli.register(sub, CLIError)
    return p


def main(argv=None) -> int:
    """Entry point of the ``tracejit`` console script and ``python -m tracejit``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except CLIError as e:
        if args.debug:
            raise
        _fail(str(e), e.code)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except BrokenPipeError:   # `tracejit inspect big.tjit | head`: the reader left; stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as e:  # a bug, or an error without a better message: still one line
        if args.debug:
            raise
        _fail(f"{type(e).__name__}: {e}", 1)
    return 0


# ============================================================================== helpers
def _check_file(path: str) -> None:
    if not os.path.exists(path):
        raise CLIError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CLIError(f"{path}: is a directory, not a saved program")


def _load(path: str, map_location=None):
    import tracejit
    _check_file(path)
    try:
        return tracejit.load(path, map_location=map_location)
    except tracejit.LoadError as e:
        msg = str(e)
        raise CLIError(msg if msg.startswith(path) else f"{path}: cannot load: {msg}") from None


def read_document(path: str) -> dict:
    """The ``tracejit`` metadata document of a saved file, read from its safetensors header only."""
    with open(path, "rb") as f:
        head = f.read(8)
        size = os.fstat(f.fileno()).st_size
        if len(head) < 8:
            raise CLIError(f"{path}: {size} bytes long: too short to be a tracejit program")
        n = struct.unpack("<Q", head)[0]
        if n > size - 8:
            raise CLIError(f"{path}: the header claims {n} bytes but the file has {size - 8} after its length "
                           "field (truncated, or not a tracejit file)")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
        doc = json.loads(header["__metadata__"]["tracejit"])
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise CLIError(f"{path}: not a tracejit program (no 'tracejit' document in the safetensors "
                       "metadata)") from None
    if not isinstance(doc, dict):
        raise CLIError(f"{path}: not a tracejit program (malformed document)")
    return doc


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _shape_text(shape) -> str:
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def _short_path(filename: str) -> str:
    if not filename:
        return filename
    cwd = os.getcwd() + os.sep
    if filename.startswith(cwd):
        return filename[len(cwd):]
    at = filename.rfind("site-packages" + os.sep)
    return filename[at + len("site-packages") + 1:] if at >= 0 else filename


def _methods(obj):
    """``[(path, module_type, method_name, fn)]`` for every traced method, root first; each module once."""
    from .runtime.traced import TracedFunction
    if isinstance(obj, TracedFunction):
        return [("", obj.__name__, obj.__name__, obj._fn)]
    out, seen = [], set()
    for path, m in obj.named_modules(remove_duplicate=False):
        if id(m) in seen:
            continue
        seen.add(id(m))
        for name, fn in getattr(m, "_traced_methods", {}).items():
            out.append((path, m.original_name, name, fn))
    return out


def _leaf_type_text(leaf) -> str:
    from .ir import Value
    if not isinstance(leaf, Value):
        return repr(leaf)
    t = leaf.type
    if hasattr(t, "shape"):
        name = _TYPE_NAMES.get(_dtype_name(t.dtype), _dtype_name(t.dtype))
        return f"{name}{_shape_text(t.shape)}"
    return str(t)


def signature(name: str, graph) -> str:
    """``forward(x: Float[2, 3, 32, 32], flag=True)``: the traced dtypes and shapes of each argument."""
    from .runtime.traced import signature_text
    return signature_text(name, graph, _leaf_type_text)


def _table(rows, header, align) -> list:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]

    def line(r):
        cells = [str(c).rjust(w) if a == ">" else str(c).ljust(w) for c, w, a in zip(r, widths, align)]
        return "  " + "  ".join(cells).rstrip()
    return [line(header)] + [line(r) for r in rows]


def tensor_rows(obj):
    """One row per distinct tensor: (name, kind, shape, dtype, bytes, aliases). Shared tensors appear once."""
    from .runtime.traced import TracedFunction
    if isinstance(obj, TracedFunction):
        return []
    rows, by_id = [], {}
    named = []   # state_dict order: per module, its parameters then its buffers
    for path, m in obj.named_modules(remove_duplicate=False):
        prefix = f"{path}." if path else ""
        named += [(prefix + n, "param", t) for n, t in m._parameters.items()]
        named += [(prefix + n, "buffer", t) for n, t in m._buffers.items()]
    for name, kind, t in named:
        if t is None:
            continue
        if id(t) in by_id:
            by_id[id(t)][5].append(name)
            continue
        row = [name, kind, _shape_text(t.shape), _dtype_name(t.dtype), t.numel() * t.element_size(), []]
        by_id[id(t)] = row
        rows.append(row)
    return rows


def op_histogram(obj) -> Counter:
    return Counter(node.op for _, _, _, fn in _methods(obj) for node in fn.graph.nodes)


# ============================================================================== inspect
def cmd_inspect(args) -> int:
    path = args.file
    _check_file(path)
    doc = read_document(path)
    obj = _load(path, map_location="meta")   # validates checksum and graphs; reads no weights, runs nothing
    from .runtime.traced import TracedFunction
    size = os.path.getsize(path)
    out = []
    is_fn = isinstance(obj, TracedFunction)
    name = obj.__name__ if is_fn else obj.original_name
    mode = "" if is_fn else f" ({'train' if obj.training else 'eval'} mode)"
    out.append(f"{path}: tracejit {'function' if is_fn else 'module'} {name}{mode}")
    out.append(f"  size:    {size} bytes ({_human(size)})")
    out.append(f"  sha256:  {sha256_file(path)[:16]}")
    out.append(f"  crc32:   {doc.get('crc32')} (stored; verified)")
    out.append(f"  format:  {doc.get('format')} schema {doc.get('schema_version')}, "
               f"saved by tracejit {doc.get('tracejit_version')}")

    methods = _methods(obj)
    out.append("")
    out.append("methods:")
    for p, _, mname, fn in methods:
        if p == "":
            out.append(f"  {signature(mname, fn.graph)}")
    n_sub = sum(1 for p, *_ in methods if p)
    if n_sub:
        n_mods = len({p for p, *_ in methods if p})
        out.append(f"  (and {n_sub} traced method(s) of {n_mods} submodule(s); see --graph)")

    rows = tensor_rows(obj)
    out.append("")
    out.append("parameters and buffers:")
    if rows:
        shown = [[r[0] + (f" (= {', '.join(r[5])})" if r[5] else ""), r[1], r[2], r[3], r[4]] for r in rows]
        out += _table(shown, ["name", "kind", "shape", "dtype", "bytes"], "<<<<>")
        total = sum(r[4] for r in rows)
        n_params = sum(1 for r in rows if r[1] == "param")
        out.append(f"  total: {_plural(len(rows), 'tensor')} ({_plural(n_params, 'parameter')}, "
                   f"{_plural(len(rows) - n_params, 'buffer')}), {total} bytes ({_human(total)})")
    else:
        out.append("  (none)")
    n_const = sum(len(fn.graph.constants) for _, _, _, fn in methods)
    if n_const:
        cbytes = sum(t.numel() * t.element_size() for _, _, _, fn in methods for t in fn.graph.constants)
        out.append(f"  constants captured by the trace: {n_const} tensors, {cbytes} bytes")

    ledger = tuple(getattr(obj, "ledger", ()))
    out.append("")
    out.append(f"ledger: {_plural(len(ledger), 'entry', 'entries')}")
    if ledger:
        lrows = [[e.kind, f"{_short_path(e.source.filename)}:{e.source.lineno}" if e.source else "-",
                  " ".join(str(e.message).split())] for e in ledger]
        out += _table(lrows, ["kind", "source", "message"], "<<<")

    from .runtime.guard_table import guard_rows
    grows = guard_rows(methods)
    out += ["", f"guards: {len(grows)} (checked at every call; see docs/DESIGN.md, Guards)"]
    out += _table(grows, ["method", "kind", "source", "predicate", "expected"], "<<<<<") if grows else []

    hist = op_histogram(obj)
    out.append("")
    out.append(f"ops: {sum(hist.values())} nodes in {len(methods)} graph(s)")
    if hist:
        hrows = [[c, op] for op, c in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))]
        out += _table(hrows, ["count", "op"], "><")

    for p, _, mname, fn in methods:
        label = f"{p}.{mname}" if p else mname
        if args.graph:
            out.append("")
            out.append(f"graph of {label}:")
            out.append(str(fn.graph).rstrip("\n"))
        if args.code:
            out.append("")
            out.append(f"code of {label}:")
            out.append(fn.code.rstrip("\n"))
    print(_escape("\n".join(out), keep_newlines=True))
    return 0


# ============================================================================== trace
def _import_factory(ref: str):
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
    import torch
    from torch import nn
    import tracejit

    factory = _import_factory(args.factory)
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
        warnings.simplefilter("ignore", tracejit.TracerWarning)   # every one is in the ledger, shown below
        try:
            with torch.no_grad():
                traced = tracejit.trace(model, inputs, check_trace=True)
        except tracejit.TracingCheckError as e:
            raise CLIError(f"the trace check failed: {str(e).strip().splitlines()[0]}") from None
        except Exception as e:
            first = (str(e).strip().splitlines() or [""])[0]
            raise CLIError(f"tracing {args.factory} failed: {type(e).__name__}: {first}") from None
    try:
        tracejit.save(traced, args.output)
    except tracejit.SaveError as e:   # an OSError too; it says what failed and where
        raise CLIError(f"cannot save the trace to {args.output}: {e.strerror or e}") from None
    except OSError as e:
        raise CLIError(f"{args.output}: cannot write: {e.strerror or e}") from None
    except Exception as e:
        raise CLIError(f"cannot save the trace to {args.output}: {type(e).__name__}: {e}") from None

    size = os.path.getsize(args.output)
    rows = tensor_rows(traced)
    numel = sum(t.numel() for t in {id(t): t for t in traced.parameters()}.values())
    hist = op_histogram(traced)
    n_graphs = len(_methods(traced))
    aten = sum(c for op, c in hist.items() if op.startswith("aten::"))
    ledger = traced.ledger
    print(f"traced {args.factory} ({traced.original_name}) on "
          f"{', '.join(repr(s) for s in args.inputs) or 'no inputs'}")
    print(f"  file:       {args.output} ({size} bytes, {_human(size)})")
    print(f"  parameters: {numel} in {_plural(sum(1 for r in rows if r[1] == 'param'), 'tensor')} "
          f"(+{_plural(sum(1 for r in rows if r[1] == 'buffer'), 'buffer')})")
    print(f"  ops:        {sum(hist.values())} nodes in {n_graphs} graph(s), {aten} aten ops")
    print(f"  ledger:     {_plural(len(ledger), 'entry', 'entries')}")
    for e in ledger:
        src = f"{_short_path(e.source.filename)}:{e.source.lineno}" if e.source else "-"
        print(f"    {e.kind:<12} {src}  {' '.join(str(e.message).split())}")
    return 0


# ============================================================================== run
def _traced_specs(obj):
    """The input specs the root forward was traced with, or None when it takes other than plain tensors."""
    from .ir import Value
    from .runtime.traced import TracedFunction
    graph = obj.graph if isinstance(obj, TracedFunction) else obj._method("forward").graph
    args_spec, kwargs_spec = graph.in_spec.children
    if kwargs_spec.children or any(c.kind != "leaf" for c in args_spec.children):
        return None
    specs = []
    for leaf in graph.input_leaves:
        if not isinstance(leaf, Value) or not hasattr(leaf.type, "shape"):
            return None
        name = _dtype_name(leaf.type.dtype)
        if name not in _DTYPE_NAMES:
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


def cmd_run(args) -> int:
    import torch

    obj = _load(args.file)
    specs = args.inputs
    if specs is None:
        specs = _traced_specs(obj)
        if specs is None:
            raise CLIError(f"{args.file}: its forward was traced with nested or non-tensor arguments, which "
                           "--input cannot describe")
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
    print(_escape(f"ran {args.file} on {label}"))
    for name, leaf in _leaves(out):
        if isinstance(leaf, torch.Tensor):
            print(_escape(f"  {name}: {_dtype_name(leaf.dtype)}{_shape_text(leaf.shape)}"))
        else:
            print(_escape(f"  {name}: {type(leaf).__name__} {leaf!r:.60}"))
    med = statistics.median(times)
    print(f"  median call time: {med * 1e3:.3f} ms over {args.repeat} calls "
          f"(min {min(times) * 1e3:.3f} ms, max {max(times) * 1e3:.3f} ms)")
    return 0
