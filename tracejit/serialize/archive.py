"""tracejit.save / tracejit.load: a traced program as a safetensors file with the program as data.

The file is a valid safetensors file: the tensors (parameters, buffers, constants)
are its tensors, and its metadata holds one key, ``tracejit``, whose value is a
JSON document (format, schema version, CRC32 of the whole file, the program).
See docs/FORMAT.md. Nothing is pickled and no code is stored: the loader
validates the graphs (tracejit/serialize/validate.py) and generates the Python
code again with the same code generator tracing uses.
"""
from __future__ import annotations

import base64
import io
import json
import mmap
import os
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

from .. import __version__
from ..errors import LoadError, SaveError
from ..runtime.traced import TracedFunction, TracedModule, compile_method
from ..trace.ledger import LedgerEntry
from ..ir import SourceLoc, Value
from ..migrate.detect import raise_if_torch_file
from . import atomic_file, encode, validate
from .crc import crc32, crc_of

FORMAT = "tracejit"
SCHEMA_VERSION = 2
_CRC_PLACEHOLDER = "00000000"
MAX_HEADER = 100 * 1024 * 1024
_ST_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
              "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
              "BOOL": torch.bool, "C64": torch.complex64}
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
    """Write a safetensors file (header padded to 8 bytes, tensors largest element size first, then
    by name, each contiguous) streaming the tensor bytes, then patch the CRC into the header."""
    doc = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "tracejit_version": __version__,
           "crc32": _CRC_PLACEHOLDER, "program": program}
    order = sorted(tensors, key=lambda k: (-tensors[k].element_size(), k))
    entries = {}
    offset = 0
    for k in order:
        t = tensors[k]
        entries[k] = {"dtype": _ST_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    entries["__metadata__"] = {"tracejit": json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)}
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    head = struct.pack("<Q", len(header)) + header
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

    def key(self, t: torch.Tensor, key: str) -> str:
        if id(t) in self.by_id:
            return self.by_id[id(t)]
        data = t.detach()
        if data.device.type == "meta":
            raise SaveError(f"tensor {key!r} is on the meta device and has no data to save")
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

    def add(self, graph, path: str, method: str) -> int:
        where = f"method {method!r} of {path or 'the root'}"
        d = encode.encode_graph(graph, where)
        d["constants"] = [self.store.key(t, f"__constants__/{path or '_'}/{method}/{i}")
                          for i, t in enumerate(graph.constants)]
        key = json.dumps(d, sort_keys=True, separators=(",", ":"), allow_nan=False)
        if key not in self.index:
            self.index[key] = len(self.table)
            self.table.append(d)
        return self.index[key]


def _program(obj):
    store = _Tensors()
    graphs = _Graphs(store)
    if isinstance(obj, TracedFunction):
        idx = graphs.add(obj.graph, "", "forward")
        return {"kind": "function", "name": str(obj.__name__), "graphs": graphs.table,
                "methods": [["forward", idx]], "ledger": _ledger(obj.ledger)}, store.tensors
    if not isinstance(obj, TracedModule):
        raise TypeError(f"tracejit.save expects a TracedFunction or TracedModule (from tracejit.trace); "
                        f"got {type(obj).__name__}")
    first_path: dict[int, str] = {}
    modules = []
    for path, m in obj.named_modules(remove_duplicate=False):
        if id(m) in first_path:
            continue
        first_path[id(m)] = path
        if not isinstance(m, TracedModule):
            raise SaveError(f"submodule {path!r} is a {type(m).__name__}, not a TracedModule")
        prefix = path + "." if path else ""
        # name order matters (state_dict order), so mappings are lists of [name, value] pairs
        params = [[n, None if p is None else {"tensor": store.key(p, prefix + n), "requires_grad": p.requires_grad}]
                  for n, p in m._parameters.items()]
        buffers = [[n, None if b is None else store.key(b, prefix + n)] for n, b in m._buffers.items()]
        methods = [[name, graphs.add(fn.graph, path, name)] for name, fn in m._traced_methods.items()]
        modules.append({"path": path, "type": m.original_name, "training": m.training, "parameters": params,
                        "buffers": buffers, "non_persistent": sorted(m._non_persistent_buffers_set),
                        "methods": methods, "module": m})
    for entry in modules:
        m = entry.pop("module")
        entry["children"] = [[n, None if c is None else first_path[id(c)]] for n, c in m._modules.items()]
    return {"kind": "module", "name": obj.original_name, "graphs": graphs.table, "modules": modules,
            "ledger": _ledger(obj.ledger)}, store.tensors


def _ledger(entries) -> list:
    out = []
    for e in entries:
        src = [e.source.filename, e.source.lineno, e.source.function] if e.source else None
        out.append({"kind": e.kind, "message": e.message, "source": src, "value": _jsonable(e.value)})
    return out


def _jsonable(v, depth=0):
    if depth > 8:
        return str(v)
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else repr(v)
    if isinstance(v, (list, tuple)):
        return [_jsonable(x, depth + 1) for x in v]
    return str(v)


# =============================================================================== load
def load(f, map_location=None, *, extra_files=None, check_integrity: bool = True):
    """Load a program saved by ``tracejit.save``; returns a TracedFunction or TracedModule.

    ``map_location``: a device or string ("cpu", "cuda:0", "meta") to put the tensors on.
    ``extra_files``: a dict whose keys name extra files to read back; their contents (bytes) are filled in.
    Any problem with the file raises ``tracejit.LoadError`` saying what and where.
    """
    buf = _read(f)
    raise_if_torch_file(buf)   # a TorchScript / torch.save file: name it and the migration route
    try:
        return _load(buf, map_location, extra_files, check_integrity)
    except LoadError:
        raise
    except RecursionError:
        raise LoadError("the program is nested too deeply") from None
    except (MemoryError, OverflowError) as e:
        raise LoadError(f"the file describes more data than it holds ({type(e).__name__})") from None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, SyntaxError, StopIteration,
            RuntimeError) as e:
        # the checks above are meant to catch every malformed program first; this keeps a case they
        # miss from surfacing as an internal error
        raise LoadError(f"the program is malformed ({type(e).__name__}: {str(e)[:200]})") from None


def _read(f):
    if isinstance(f, (str, os.PathLike)):
        path = os.fspath(f)
        try:
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size == 0:
                    raise LoadError(f"{path}: the file is empty")
                return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
        except FileNotFoundError:
            raise LoadError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise LoadError(f"{path}: is a directory, not a saved program") from None
        except OSError as e:
            raise LoadError(f"{path}: cannot read: {e}") from None
    if hasattr(f, "read"):
        data = f.read()
        if not isinstance(data, (bytes, bytearray)):
            raise LoadError("the file object must be opened in binary mode")
        return bytearray(data)
    raise TypeError(f"tracejit.load expects a path or a binary file object; got {type(f).__name__}")


def _load(buf, map_location, extra_files, check_integrity: bool):
    size = len(buf)
    if size < 8:
        raise LoadError(f"the file is {size} bytes long: too short to be a tracejit program")
    header_len = struct.unpack("<Q", bytes(buf[:8]))[0]
    if header_len > min(MAX_HEADER, size - 8):
        raise LoadError(f"the header claims {header_len} bytes but the file has {size - 8} after its length "
                        "field (truncated, or not a tracejit file)")
    raw_header = bytes(buf[8:8 + header_len])
    try:
        header = json.loads(raw_header.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LoadError(f"the file header is not valid JSON ({e}); not a tracejit file, or damaged") from None
    if not isinstance(header, dict) or not isinstance(header.get("__metadata__"), dict) \
            or not isinstance(header["__metadata__"].get("tracejit"), str):
        raise LoadError("this is not a tracejit program: the safetensors metadata has no 'tracejit' entry")
    try:
        doc = json.loads(header["__metadata__"]["tracejit"], object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        raise LoadError(f"the program document is not valid JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise LoadError("this is not a tracejit program (wrong format marker)")
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise LoadError(f"bad schema version {version!r}")
    if version > SCHEMA_VERSION:
        raise LoadError(f"this file uses tracejit schema version {version}, newer than this tracejit "
                        f"({__version__}) reads (version {SCHEMA_VERSION}); upgrade tracejit to load it")
    if check_integrity:
        _check_crc(buf, header_len, doc.get("crc32"))
    data_start = 8 + header_len
    tensors = _tensors(header, buf, data_start, size, map_location)
    program = doc.get("program")
    if not isinstance(program, dict):
        raise LoadError("the file holds no program")
    if extra_files is not None:
        stored = program.get("extra_files", {})
        if not isinstance(stored, dict) or not all(isinstance(v, str) for v in stored.values()):
            raise LoadError("the extra files table is malformed (expected name -> base64 text)")
        for name in list(extra_files):
            if name in stored:
                try:
                    extra_files[name] = base64.b64decode(stored[name], validate=True)   # bytes, as torch.jit's load does
                except (ValueError, TypeError):
                    raise LoadError(f"extra file {name!r} is damaged") from None
    kind = program.get("kind")
    if kind == "function":
        return _load_function(program, tensors)
    if kind == "module":
        return _load_module(program, tensors)
    raise LoadError(f"unknown program kind {kind!r}")


def _no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise LoadError(f"the file names {k!r} twice")
        d[k] = v
    return d


def _check_crc(buf, header_len: int, stored) -> None:
    if not isinstance(stored, str) or len(stored) != 8:
        raise LoadError("the file has no valid checksum")
    marker = f'crc32\\":\\"{stored}'.encode()
    header = bytes(buf[8:8 + header_len])
    at = header.find(marker)
    if at < 0:
        raise LoadError("the checksum field could not be found in the header")
    zeroed = header[:at + len(marker) - 8] + _CRC_PLACEHOLDER.encode() + header[at + len(marker):]
    crc = zlib.crc32(bytes(buf[:8]))
    crc = zlib.crc32(zeroed, crc)
    crc = crc32(buf, 8 + header_len, value=crc)
    if f"{crc:08x}" != stored:
        raise LoadError(f"checksum mismatch: the file says {stored}, its contents give {crc:08x}; the file is "
                        "damaged (a flipped byte, a truncation, or an edit)")


def _tensors(header: dict, buf, data_start: int, size: int, map_location) -> dict:
    device = torch.device(map_location) if map_location is not None else None
    spans = []
    out = {}
    data_len = size - data_start
    for key, info in header.items():
        if key == "__metadata__":
            continue
        where = f"tensor {key[:80]!r}"
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise LoadError(f"{where}: malformed entry")
        dtype = _ST_DTYPES.get(info["dtype"]) if isinstance(info["dtype"], str) else None
        if dtype is None:
            raise LoadError(f"{where}: unsupported dtype {str(info['dtype'])[:20]!r}")
        shape, offsets = info["shape"], info["data_offsets"]
        if not (isinstance(shape, list) and len(shape) <= 64 and all(isinstance(s, int) and not isinstance(s, bool)
                                                                      and s >= 0 for s in shape)):
            raise LoadError(f"{where}: bad shape")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            raise LoadError(f"{where}: bad data offsets")
        begin, end = offsets
        numel = 1
        for s in shape:
            numel *= s
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        if not 0 <= begin <= end <= data_len or end - begin != nbytes:
            raise LoadError(f"{where}: its data ({begin}..{end}) does not fit its shape {shape} and dtype, or lies "
                            f"outside the file's {data_len} data bytes")
        spans.append((begin, end, key))
        if device is not None and device.type == "meta":
            out[key] = torch.empty(shape, dtype=dtype, device="meta")
            continue
        if numel == 0:
            t = torch.empty(shape, dtype=dtype)
        else:
            t = torch.frombuffer(buf, dtype=dtype, count=numel, offset=data_start + begin).view(shape)
        out[key] = t.to(device) if device is not None else t
    spans.sort()
    for (b0, e0, k0), (b1, e1, k1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise LoadError(f"tensors {k0[:60]!r} and {k1[:60]!r} overlap in the file")
    return out


def _tensor(tensors: dict, key, where: str) -> torch.Tensor:
    if not isinstance(key, str) or key not in tensors:
        raise LoadError(f"{where}: refers to tensor {str(key)[:80]!r}, which the file does not hold")
    return tensors[key]


def _decode_graph(d, where: str, tensors: dict):
    if not isinstance(d, dict):
        raise LoadError(f"{where}: malformed graph")
    g = encode.decode_graph(d, where)
    consts = d.get("constants", [])
    if not isinstance(consts, list):
        raise LoadError(f"{where}: malformed constants")
    g.constants = [_tensor(tensors, k, where) for k in consts]
    return g


def _ledger_entries(items) -> tuple:
    out = []
    if not isinstance(items, list):
        raise LoadError("malformed ledger")
    for e in items:
        if not isinstance(e, dict) or not isinstance(e.get("kind"), str) or not isinstance(e.get("message"), str):
            raise LoadError("malformed ledger entry")
        src = e.get("source")
        source = None
        if src is not None:
            if not (isinstance(src, list) and len(src) == 3 and isinstance(src[0], str) and isinstance(src[1], int)
                    and not isinstance(src[1], bool)):
                raise LoadError("malformed ledger entry source (expected [file, line, function])")
            source = SourceLoc(src[0], src[1], str(src[2]))
        out.append(LedgerEntry(e["kind"], e["message"], source, e.get("value")))
    return tuple(out)


class _GraphTable:
    """Decodes each stored graph once; hands out its Graph (with constants) by index."""

    def __init__(self, program: dict, tensors: dict):
        table = program.get("graphs")
        if not isinstance(table, list):
            raise LoadError("the program has no graph table")
        self.raw = table
        self.tensors = tensors
        self.decoded: dict[int, object] = {}

    def get(self, idx, where: str, fresh: bool = False):
        """The Graph at ``idx`` (decoded once); ``fresh`` decodes a private copy."""
        if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < len(self.raw):
            raise LoadError(f"{where}: graph index {idx!r} is not in the graph table")
        if fresh:
            return _decode_graph(self.raw[idx], f"{where} (graph {idx})", self.tensors)
        if idx not in self.decoded:
            self.decoded[idx] = _decode_graph(self.raw[idx], f"{where} (graph {idx})", self.tensors)
        return self.decoded[idx]


def _load_function(program: dict, tensors: dict) -> TracedFunction:
    methods = _pairs(program.get("methods"), "function")
    if [n for n, _ in methods] != ["forward"]:
        raise LoadError("a saved function must hold exactly one method, 'forward'")
    g = _GraphTable(program, tensors).get(methods[0][1], "function")
    validate.check_graph(g, "function", None, None)
    _check_weights(g, None, "function")
    name = program.get("name")
    if not isinstance(name, str):
        raise LoadError("malformed function name")
    return TracedFunction(name, g, _ledger_entries(program.get("ledger", [])))


def _load_module(program: dict, tensors: dict) -> TracedModule:
    entries = program.get("modules")
    if not isinstance(entries, list) or not entries:
        raise LoadError("the program holds no modules")
    by_path: dict[str, dict] = {}
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("path"), str):
            raise LoadError("malformed module entry")
        if e["path"] in by_path:
            raise LoadError(f"module {e['path']!r} is described twice")
        by_path[e["path"]] = e
    if "" not in by_path:
        raise LoadError("the program has no root module")
    made = _build_modules(by_path, tensors)
    table = _GraphTable(program, tensors)
    methods: dict[str, dict[str, int]] = {}
    for path, e in by_path.items():
        methods[path] = {}
        for name, idx in _pairs(e.get("methods", []), f"module {path}"):
            validate.identifier(name, f"module {path!r} method")
            methods[path][name] = idx
    root = made[""]
    compiled: dict[tuple, object] = {}
    checked: set[int] = set()
    linked: dict[int, tuple] = {}
    # deepest modules first, so a caller links to the graphs its submodules really run
    path_of = {id(m): p for p, m in made.items()}
    for path in sorted(methods, key=lambda p: -len(p.split(".")) if p else 0):
        named = methods[path]
        owner = made[path]
        for name, idx in named.items():
            where = f"module {path or '(root)'}, method {name!r}"
            g = table.get(idx, where)

            def has_tensor(rel, kind, owner=owner):
                *mods, last = rel.split(".")
                m = owner
                for part in mods:
                    m = m._modules.get(part)
                    if m is None:
                        return False
                store = m._parameters if kind == "parameter" else m._buffers
                return store.get(last) is not None

            def methods_of(rel, owner=owner):
                m = _walk(owner, rel)
                return {} if m is None else methods[path_of[id(m)]]

            if idx in checked:
                validate.check_module_refs(g, where, has_tensor, methods_of)
            else:
                validate.check_graph(g, where, has_tensor, methods_of)
                checked.add(idx)
            _check_weights(g, owner, where)
            callees = []
            for i, n in enumerate(g.nodes):
                if n.op == "tracejit::call_module":
                    callee = _walk(owner, n.attrs["path"])._traced_methods[n.attrs["method"]].graph
                    _check_call(n, callee, f"{where}, node {i}")
                    callees.append(callee)
            # a graph shared by several modules is compiled once when its callees are the same graphs
            key = (idx, name, path == "", tuple(map(id, callees)))
            if key not in compiled:
                if linked.setdefault(idx, key) != key:
                    # same graph, other callees (a ReLU here, an Identity there): it needs its own links
                    g = table.get(idx, where, fresh=True)
                it = iter(callees)
                for node in g.nodes:
                    if node.op == "tracejit::call_module":
                        node.attrs["graph"] = next(it)
                label = f"{root.original_name}.{path}" if path else root.original_name
                compiled[key] = compile_method(g, name, label, guards=(path == ""))
            owner._install(name, compiled[key])
    root._variants[root.training] = {p: dict(m._traced_methods) for p, m in made.items()}
    root.ledger = _ledger_entries(program.get("ledger", []))
    return root


def _check_call(node, callee, at: str) -> None:
    """A call_module node must pass what the callee takes and receive what it returns."""
    n_caps = sum(1 for v in callee.inputs if v.hint == "__capture__")
    if len(node.args) != len(callee.inputs) or node.attrs["n_captures"] != n_caps:
        raise LoadError(f"{at}: passes {len(node.args)} arguments ({node.attrs['n_captures']} captured) to a method "
                        f"that takes {len(callee.inputs)} arguments ({n_caps} captured)")
    for a, v in zip(node.args, callee.inputs):
        if not isinstance(a, Value) or hasattr(a.type, "shape") != hasattr(v.type, "shape"):
            raise LoadError(f"{at}: an argument does not match the callee's input kind")
    if len(node.outputs) != len(callee.outputs):
        raise LoadError(f"{at}: receives {len(node.outputs)} values from a method that returns {len(callee.outputs)}")


def _walk(module, rel: str):
    """The submodule at the dotted path ``rel`` below ``module``, or None."""
    for part in rel.split("."):
        module = module._modules.get(part)
        if module is None:
            return None
    return module


def _build_modules(by_path: dict, tensors: dict) -> dict:
    made: dict[str, TracedModule] = {}
    shared: dict = {}   # one nn.Parameter per stored tensor, so parameters shared at save time stay shared
    for path, e in by_path.items():
        where = f"module {path or '(root)'}"
        tm = TracedModule(_type_name(e.get("type"), where))
        tm.training = bool(e.get("training", False))
        for n, p in _pairs(e.get("parameters", []), where):
            if p is None:
                tm._parameters[n] = None
                continue
            if not isinstance(p, dict):
                raise LoadError(f"{where}: malformed parameter {n!r}")
            t = _tensor(tensors, p.get("tensor"), f"{where}, parameter {n!r}")
            tm._parameters[n] = _parameter(t, bool(p.get("requires_grad", True)), shared, p.get("tensor"))
        for n, key in _pairs(e.get("buffers", []), where):
            tm._buffers[n] = None if key is None else _tensor(tensors, key, f"{where}, buffer {n!r}")
        nonp = e.get("non_persistent", [])
        if not isinstance(nonp, list):
            raise LoadError(f"{where}: malformed non_persistent list")
        tm._non_persistent_buffers_set = set(str(x) for x in nonp)
        made[path] = tm
    for path, e in by_path.items():
        for n, child in _pairs(e.get("children", []), f"module {path}"):
            if child is not None and (not isinstance(child, str) or child not in made):
                raise LoadError(f"module {path!r} names a child {str(child)[:60]!r} that the file does not describe")
            made[path]._modules[n] = None if child is None else made[child]
    _check_acyclic(made[""])
    return made


def _check_acyclic(root) -> None:
    """Module trees may share modules but never contain themselves."""
    done: set[int] = set()

    def visit(m, path: str, stack: set[int]):
        if id(m) in stack:
            raise LoadError(f"the module hierarchy has a cycle: {path!r} is one of its own ancestors "
                            f"(a {m.original_name})")
        if id(m) in done:
            return
        stack.add(id(m))
        for name, child in m._modules.items():
            if child is not None:
                visit(child, f"{path}.{name}" if path else name, stack)
        stack.discard(id(m))
        done.add(id(m))

    visit(root, "", set())


def _check_weights(g, owner, where: str) -> None:
    """Parameters, buffers and constants must have the dtype and shape the graph was traced with."""
    for i, node in enumerate(g.nodes):
        if node.op == "tracejit::get_attr":
            *mods, last = node.attrs["path"].split(".")
            m = owner
            for part in mods:
                m = m._modules[part]
            t = (m._parameters if node.attrs["kind"] == "parameter" else m._buffers)[last]
        elif node.op == "tracejit::constant":
            t = g.constants[node.attrs["index"]]
        else:
            continue
        want = node.outputs[0].type if node.outputs and node.outputs[0] is not None else None
        if want is None or not hasattr(want, "shape"):
            raise LoadError(f"{where}, node {i}: {node.op} has no tensor type")
        if t.dtype != want.dtype or tuple(t.shape) != tuple(want.shape):
            raise LoadError(f"{where}, node {i}: {node.attrs.get('path', 'constant')} is stored as "
                            f"{str(t.dtype).replace('torch.', '')}{list(t.shape)} but the graph was traced with "
                            f"{str(want.dtype).replace('torch.', '')}{list(want.shape)}")


def _parameter(t, requires_grad: bool, cache: dict, key) -> nn.Parameter:
    if key in cache:
        return cache[key]
    p = nn.Parameter(t, requires_grad=requires_grad and (t.is_floating_point() or t.is_complex()))
    cache[key] = p
    return p


def _type_name(name, where) -> str:
    if not isinstance(name, str) or not name or len(name) > 200:
        raise LoadError(f"{where}: bad module type name")
    return name


def _pairs(x, where) -> list:
    """A list of [name, value] pairs with distinct string names."""
    if not isinstance(x, list) or not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in x):
        raise LoadError(f"{where}: expected a list of [name, value] pairs")
    names = [p[0] for p in x]
    if len(set(names)) != len(names):
        raise LoadError(f"{where}: a name appears twice")
    for n in names:
        if not n or len(n) > 200 or "." in n:
            raise LoadError(f"{where}: bad name {n[:60]!r}")
    return x
