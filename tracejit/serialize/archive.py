"""tracejit.save / tracejit.load: a traced program as a safetensors file with the program as data.

The file is a valid safetensors file: the tensors (parameters, buffers, constants)
are its tensors, and its metadata holds one key, ``tracejit``, whose value is a
JSON document (format, schema version, CRC32 of the whole file, the program).
See docs/FORMAT.md. Nothing is pickled and no code is stored: the loader
validates the graphs (tracejit/serialize/validate.py) and generates the Python
code again with the same code generator tracing uses. This module writes files; loader.py and
program_decoder.py read them.
"""
from __future__ import annotations

import base64
import io
import json
import os
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor

import torch

from ..version import __version__
from ..errors import LoadError, SaveError
from ..program import Program
from ..runtime.traced import TracedFunction, TracedModule, program_of
from . import atomic_file, encode, left_out, limits, save_check, specializations
from .left_out_stubs import LEFT_OUT_ATTR, MAX_REASON
from .crc import crc_of
from .file_format import CRC_PLACEHOLDER as _CRC_PLACEHOLDER, FORMAT, MAX_HEADER, SCHEMA_VERSION  # noqa: F401
from .file_format import ALIGN, ST_DTYPES as _ST_DTYPES

_ST_NAMES = {d: n for n, d in _ST_DTYPES.items()}


# =============================================================================== save
def save(obj, f, *, extra_files=None, durable: bool = True) -> None:
    """Save a TracedFunction or TracedModule to ``f`` (a path or a binary file object).

    The write is atomic for paths (``atomic_file``): the file appears complete or not at all,
    so an exception or a kill of the process leaves any existing file as it was and no
    temporary file behind; the mode is that of ``torch.save`` (an existing file keeps its
    permissions, a new one gets 0o666 minus the umask); a symbolic link is written through.
    With ``durable=True`` (the default) the file is also flushed to the disk before it takes
    its name (fsync), so a power loss cannot leave a half-written file either; ``durable=False``
    skips that, as torch.save does. Failures to write are ``SaveError`` (an ``OSError``).

    >>> import io, torch, tracejit
    >>> t = tracejit.trace(lambda x: x * 2, torch.ones(2))
    >>> buf = io.BytesIO(); tracejit.save(t, buf); _ = buf.seek(0)
    >>> tracejit.load(buf)(torch.ones(3))
    tensor([2., 2., 2.])
    """
    program, tensors = _program(obj)
    if extra_files:
        program["extra_files"] = {str(k): base64.b64encode(v.encode() if isinstance(v, str) else bytes(v)).decode()
                                  for k, v in sorted(extra_files.items())}
    if isinstance(f, (str, os.PathLike)):
        with atomic_file.replacing(os.fspath(f), durable=durable) as out:
            _write(out, program, tensors)
    elif hasattr(f, "write"):
        out = io.BytesIO()
        _write(out, program, tensors)
        try:
            f.write(out.getbuffer())
        except SaveError:
            raise
        except OSError as e:
            raise SaveError(e.errno, f"tracejit.save could not write to the file object {f!r:.80} "
                            f"({e.strerror or e})") from e
    else:
        raise TypeError(f"tracejit.save expects a path or a binary file object; got {type(f).__name__}")


def to_bytes(obj, extra_files=None) -> bytes:
    out = io.BytesIO()
    save(obj, out, extra_files=extra_files)
    return out.getvalue()


def _write(out, program: dict, tensors: dict) -> None:
    """Write a safetensors file (header padded with spaces so the data starts at a multiple of ``ALIGN`` bytes;
    the tensors whose size is a multiple of ``ALIGN`` first, so each of them starts aligned too, then the others;
    each group largest element size first, then by name; each contiguous) streaming the tensor bytes, then patch
    the CRC into the header. safetensors allows no gap between tensors, so the others are aligned only to their
    element size: the loader copies them (loader.aligned)."""
    doc = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "tracejit_version": __version__,
           "crc32": _CRC_PLACEHOLDER, "program": program}
    order = sorted(tensors, key=lambda k: (tensors[k].nbytes % ALIGN != 0, -tensors[k].element_size(), k))
    entries = {}
    offset = 0
    for k in order:
        t = tensors[k]
        entries[k] = {"dtype": _ST_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    entries["__metadata__"] = {"tracejit": json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)}
    try:   # the loader's bound on the document's values (limits.py), said here, not on the server (round 26)
        limits.check_document_text(entries["__metadata__"]["tracejit"])
    except LoadError as e:
        raise SaveError(f"tracejit.load would refuse this program, so it is not saved: {e}; a program unrolled per "
                        "item (a detector's eight images) is smaller traced at a smaller batch") from None
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-(8 + len(header)) % ALIGN)   # the data starts ALIGN-aligned (8: the length field)
    head = struct.pack("<Q", len(header)) + header
    if len(header) > MAX_HEADER:   # load refuses it (loader.read_header): said here, not on the server (round 26)
        raise SaveError(f"the file's header (its program document and extra files) would take {len(header)} bytes, "
                        f"more than the {MAX_HEADER} tracejit.load reads, so it is not saved; a program unrolled "
                        "per item (a detector's eight images) is smaller traced at a smaller batch")
    save_check.check_loadable(program, tensors, len(head) + offset)   # refused here, not on the server
    out.write(head)
    views = [memoryview(tensors[k].reshape(-1).view(torch.uint8).numpy()) for k in order if tensors[k].numel()]
    # the CRC runs over the tensors on a second thread while they are written
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(crc_of, views, zlib.crc32(head))
        for data in views:
            _write_all(out, data)
        crc = running.result()
    marker = f'crc32\\":\\"{_CRC_PLACEHOLDER}'.encode()
    at = head.find(marker)
    if at < 0:  # pragma: no cover
        raise SaveError("could not place the checksum in the file header")
    end = out.tell()
    out.seek(at + len(marker) - len(_CRC_PLACEHOLDER))
    out.write(f"{crc:08x}".encode())
    out.seek(end)


def _write_all(out, data) -> None:
    out.write(data)


class _Tensors:
    """Collects tensors under stable keys; a tensor object seen twice is stored once."""

    def __init__(self):
        self.by_id: dict[int, str] = {}
        self.tensors: dict[str, torch.Tensor] = {}
        self.devices: dict[str, str] = {}   # key -> the device of a tensor saved off the CPU (load puts it back)

    def key(self, t: torch.Tensor, key: str) -> str:
        if id(t) in self.by_id:
            return self.by_id[id(t)]
        data = t.detach()
        if data.device.type == "meta":
            raise SaveError(f"tensor {key!r} is on the meta device and has no data to save")
        if data.device.type != "cpu":
            self.devices[key] = str(data.device)
        data = data.to("cpu").contiguous()
        self.by_id[id(t)] = key
        self.tensors[key] = data
        return key


class _Graphs:
    """The program's graph table: identical graphs (the 12 layers of a BERT) are stored once."""

    def __init__(self, store: _Tensors):
        self.store = store
        self.table: list[dict] = []
        self.index: dict[str, int] = {}

    def add(self, graph, path: str, method: str, encoded: dict | None = None) -> int:
        where = f"method {method!r} of {path or 'the root'}"
        d = dict(encoded) if encoded is not None else encode.encode_graph(graph, where)
        d["constants"] = [self.store.key(t, f"__constants__/{path or '_'}/{method}/{i}")
                          for i, t in enumerate(graph.constants)]
        key = json.dumps(d, sort_keys=True, separators=(",", ":"), allow_nan=False)
        if key not in self.index:
            self.index[key] = len(self.table)
            self.table.append(d)
        return self.index[key]


def _program(obj):
    """The file's program document and tensors, from the object's Program (tracejit/program.py)."""
    if not isinstance(obj, (TracedFunction, TracedModule)):
        hint = ""
        if getattr(obj, "backend", None) is not None:   # a program optimize_for_inference built on a backend
            hint = (". This is a program optimize_for_inference built on a backend: save the traced program it was "
                    "built from (tracejit.save(traced, f)) and build the backend again after tracejit.load "
                    "(AutoProgram.save(f) keeps auto's choice, so the server does not measure again)")
        raise TypeError(f"tracejit.save expects a TracedFunction or TracedModule (from tracejit.trace); "
                        f"got {type(obj).__name__}{hint}")
    for path, m in (obj.named_modules() if isinstance(obj, TracedModule) else ()):
        if not isinstance(m, TracedModule):
            raise SaveError(f"submodule {path!r} is a {type(m).__name__}, not a TracedModule")
    return program_document(program_of(obj), _left_out_of(obj))


def _left_out_of(obj) -> dict:
    """``{path: {method: reason}}``: the methods a loaded program's file left out (serialize/left_out_stubs.py),
    left out again when it is saved."""
    if not isinstance(obj, TracedModule):
        return {}
    return {path: dict(m.__dict__.get(LEFT_OUT_ATTR, {})) for path, m in obj.named_modules()
            if m.__dict__.get(LEFT_OUT_ATTR)}


def program_document(program: Program, kept_left_out: dict | None = None):
    """``(program, tensors)``: a Program as the file's JSON-able program document and its tensors by key."""
    store = _Tensors()
    graphs = _Graphs(store)
    if program.kind == "function":
        idx = graphs.add(program.graph("forward"), "", "forward")
        specs = specializations.encode_table(program, graphs)
        return _with_devices({"kind": "function", "name": str(program.name), "graphs": graphs.table,
                              "methods": [["forward", idx]], "specializations": specs,
                              "ledger": _ledger(program.ledger)}, store)
    modules = []
    saved = left_out.plan(program, kept_left_out)   # submodule methods whose trace holds an object (left_out.py)
    for m in program.modules:
        path = m.path
        prefix = path + "." if path else ""
        # name order matters (state_dict order), so mappings are lists of [name, value] pairs
        params = [[n, None if p is None else {"tensor": store.key(p, prefix + n), "requires_grad": p.requires_grad}]
                  for n, p in m.parameters]
        buffers = [[n, None if b is None else store.key(b, prefix + n)] for n, b in m.buffers]
        methods = [[name, graphs.add(graph, path, name, saved.encoded.get(id(graph)))]
                   for name, graph in saved.methods[path]]
        entry = {"path": path, "type": m.type_name, "training": m.training, "parameters": params,
                 "buffers": buffers, "non_persistent": sorted(m.non_persistent),
                 "methods": methods, "children": [list(c) for c in m.children]}
        if saved.left_out.get(path):   # only then: a file without such methods is written as before
            entry["left_out"] = [[name, reason[:MAX_REASON]] for name, reason in saved.left_out[path]]
        modules.append(entry)
    specs = specializations.encode_table(program, graphs)
    return _with_devices({"kind": "module", "name": program.name, "graphs": graphs.table, "modules": modules,
                          "specializations": specs, "ledger": _ledger(program.ledger)}, store)


def _with_devices(document: dict, store: _Tensors):
    """``(document, tensors)``, the document naming the device of each tensor saved off the CPU (a program all
    on the CPU writes the same document as before the field existed)."""
    if store.devices:
        document["tensor_devices"] = dict(sorted(store.devices.items()))
    return document, store.tensors


def _ledger(entries) -> list:
    out = []
    for e in entries:
        src = [e.source.filename, e.source.lineno, e.source.function] if e.source else None
        out.append({"kind": e.kind, "message": e.message, "source": src, "value": _jsonable(e.value)})
    return out


def _jsonable(v, depth=0):
    """A ledger value as the loader takes it (limits.ledger_value): strings of at most limits.MAX_STRING
    characters (longer ones cut, marked "..."), at most 9 levels of lists, anything else as its str()."""
    if depth <= 8 and (v is None or isinstance(v, (bool, int))):
        return v
    if depth <= 8 and isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else repr(v)
    if depth <= 8 and isinstance(v, (list, tuple)):
        return [_jsonable(x, depth + 1) for x in v]
    text = v if isinstance(v, str) else str(v)
    return text if len(text) <= limits.MAX_STRING else text[:limits.MAX_STRING - 3] + "..."
