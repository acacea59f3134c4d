"""What the commands share: the one-line error (``CLIError``, ``fail``), escaping of text read from
files, loading a program or reading its Program with the CLI's error wording, and the printing helpers
(tables, sizes, shapes, the traced methods, parameters and ops of a Program: tracejit/program.py)."""
from __future__ import annotations

import hashlib
import mmap
import os
import shlex
import sys
from collections import Counter

from ..errors import LoadError, SaveError
from ..escape import terminal
from ..porting import load as _load, save as _save
from ..serialize import read_program as _read_program
from ..serialize.encode import dtype_name  # the one dtype-name table: serialize's
from ..serialize.torch_files import is_torch_file

PROG = "tracejit"


class CLIError(Exception):
    """A failure to report as one ``tracejit: error:`` line; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def fail(message: str, code: int):
    """Print ``tracejit: error: MESSAGE`` (one line, escaped) to stderr and exit with ``code``."""
    line = escape(" ".join(str(message).split()))  # one line, whatever the message held
    sys.stderr.write(f"{PROG}: error: {line}\n")
    sys.exit(code)


def escape(text: str, keep_newlines: bool = False) -> str:
    """``text`` with every control or format character (terminal escapes, bidi overrides) shown
    as a Python escape, so nothing read from a file can drive the terminal (tracejit/escape.py)."""
    return terminal(text, keep_newlines)


# ---- files and programs ---------------------------------------------------------------------------
def check_file(path: str, what: str = "a tracejit program") -> None:
    """A missing path, a directory or an empty file: one clear line saying it is not ``what``."""
    if not os.path.exists(path):
        raise CLIError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CLIError(f"{path}: is a directory, not {what}")
    if os.path.getsize(path) == 0:
        raise CLIError(f"{path}: the file is empty, not {what}")


def file_kind(path: str) -> str:
    """``"torchscript"``, ``"torch.save"``, ``"tracejit"`` (a safetensors file: what tracejit saves),
    ``"short"`` (under 9 bytes: the loader says so) or ``"other"`` (text, anything else), from the
    first bytes and a zip's directory: nothing runs."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(9)
        if size and (kind := _torch_kind(f, mmap, is_torch_file)):
            return kind
    if len(head) < 9:
        return "short"
    if int.from_bytes(head[:8], "little") <= size - 8 and head[8:9] == b"{":
        return "tracejit"
    return "other"


def _torch_kind(f, mmap, is_torch_file):
    try:
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return is_torch_file(buf)
    except (OSError, ValueError):
        return None


def first_bytes(path: str, n: int = 16) -> str:
    with open(path, "rb") as f:
        return repr(f.read(n))


def readable_kind(path: str) -> str:
    """``file_kind(path)``, or one clear line when the file cannot be read."""
    try:
        return file_kind(path)
    except OSError as e:
        raise CLIError(f"{path}: cannot read: {e.strerror or e}") from None


def check_program_file(path: str) -> None:
    """One clear line for a path that is not a tracejit program: missing, a directory, empty, a
    torch.save file, a TorchScript archive, or anything else (a text file...)."""
    check_file(path)
    check_not_torch_file(path)
    kind = readable_kind(path)
    if kind == "other":
        raise CLIError(f"{path}: not a tracejit program (a tracejit file is a safetensors file; this one starts "
                       f"with {first_bytes(path)})")


def check_archive_file(path: str) -> None:
    """What ``migrate`` reads: a TorchScript archive; one clear line for anything else."""
    check_file(path, "a TorchScript archive")
    kind = readable_kind(path)
    if kind == "tracejit":
        raise CLIError(f"{path}: this is a tracejit program already, nothing to migrate (load it with "
                       "tracejit.load, look at it with `tracejit inspect`)")
    if kind == "torch.save":
        raise CLIError(f"{path}: this is a torch.save file, not a TorchScript archive (torch.jit.save): migrate "
                       "converts archives only; load its weights into the model and trace it with `tracejit trace`")
    if kind in ("other", "short"):
        raise CLIError(f"{path}: not a TorchScript archive (a zip file saved by torch.jit.save); this one starts "
                       f"with {first_bytes(path)}")


def check_not_torch_file(path: str) -> None:
    """A TorchScript archive or torch.save file: say so and give the migration command for it."""
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                kind = is_torch_file(buf)
    except OSError:
        return   # unreadable: tracejit.load says why
    if kind is None:
        return
    command = (f"tracejit migrate {shlex.quote(path)} -o {shlex.quote(os.path.splitext(path)[0] + '.tjit')} "
               "--input DTYPE[SHAPE] ...")
    if kind == "torchscript":
        raise CLIError(f"{path}: this is a TorchScript archive, not a tracejit program; migrate it with "
                       f"`{command}` (one --input per forward argument; only for files you trust: migrating "
                       "runs the archive's TorchScript)")
    raise CLIError(f"{path}: this is a torch.save file, not a tracejit program; if it holds a TorchScript module, "
                   f"migrate it with `{command}`; if it holds weights, load them into the model and trace it "
                   "with `tracejit trace`")


def load(path: str, map_location=None):
    """``tracejit.load(path)``; a LoadError becomes a CLIError naming the file."""
    return _with_cli_errors(path, _load, map_location)


def save_program(traced, output: str) -> None:
    """``tracejit.save(traced, output)``; a failure becomes a CLIError naming the file (trace and trace --hf)."""
    try:
        _save(traced, output)
    except SaveError as e:   # an OSError too; it says what failed and where
        raise CLIError(f"cannot save the trace to {output}: {e.strerror or e}") from None
    except OSError as e:
        raise CLIError(f"{output}: cannot write: {e.strerror or e}") from None
    except Exception as e:
        raise CLIError(f"cannot save the trace to {output}: {type(e).__name__}: {e}") from None


def read_program(path: str, map_location=None):
    """The Program the file holds (``tracejit.serialize.read_program``: decoded, upgraded and validated,
    nothing compiled); a LoadError becomes a CLIError naming the file."""
    return _with_cli_errors(path, _read_program, map_location)


def _with_cli_errors(path: str, read, map_location):
    check_program_file(path)
    try:
        return read(path, map_location=map_location)
    except LoadError as e:
        msg = str(e)
        raise CLIError(msg if msg.startswith(path) else f"{path}: cannot load: {msg}") from None


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def methods_of(program):
    """``[(path, module_type, method_name, graph)]`` for every traced method of ``program`` (a Program),
    root first; each module once."""
    if program.kind == "function":
        return [("", program.name, program.name, program.graph("forward"))]
    return [(m.path, m.type_name, name, graph) for m in program.modules for name, graph in m.methods]


def tensor_rows(program):
    """One row per distinct tensor of ``program`` (a Program): (name, kind, shape, dtype, bytes, aliases),
    named as ``named_modules(remove_duplicate=False)`` walks the tree (a shared module at each of its
    paths), each module's parameters then its buffers. Shared tensors appear once."""
    if program.kind == "function":
        return []
    entries = {m.path: m for m in program.modules}
    named = []

    def walk(entry, prefix: str) -> None:
        named.extend((prefix + n, "param", t) for n, t in entry.parameters)
        named.extend((prefix + n, "buffer", t) for n, t in entry.buffers)
        for name, child in entry.children:
            if child is not None:
                walk(entries[child], f"{prefix}{name}.")

    walk(program.root, "")
    rows, by_id = [], {}
    for name, kind, t in named:
        if t is None:
            continue
        if id(t) in by_id:
            by_id[id(t)][5].append(name)
            continue
        row = [name, kind, shape_text(t.shape), dtype_name(t.dtype), t.numel() * t.element_size(), []]
        by_id[id(t)] = row
        rows.append(row)
    return rows


def op_histogram(program) -> Counter:
    return Counter(node.op for _, _, _, graph in methods_of(program) for node in graph.nodes)


# ---- printing -------------------------------------------------------------------------------------
def shape_text(shape) -> str:
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def short_path(filename: str) -> str:
    if not filename:
        return filename
    cwd = os.getcwd() + os.sep
    if filename.startswith(cwd):
        return filename[len(cwd):]
    at = filename.rfind("site-packages" + os.sep)
    return filename[at + len("site-packages") + 1:] if at >= 0 else filename


def table(rows, header, align) -> list:
    """Lines of a left/right aligned (``align``: a ``<`` or ``>`` per column) text table; each cell
    escaped for the terminal (one line, whatever a file put in it)."""
    rows = [[terminal(c) for c in r] for r in rows]
    header = [terminal(c) for c in header]
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]

    def line(r):
        cells = [c.rjust(w) if a == ">" else c.ljust(w) for c, w, a in zip(r, widths, align)]
        return "  " + "  ".join(cells).rstrip()
    return [line(header)] + [line(r) for r in rows]


def ledger_source(entry) -> str:
    return f"{short_path(entry.source.filename)}:{entry.source.lineno}" if entry.source else "-"
