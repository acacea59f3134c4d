"""tracejit.load, part 1: the container. Reads the file (into memory, or mapped with mmap=True),
checks the safetensors header, the CRC and the limits, makes the tensors, and hands the program
document to program_decoder.py, which returns the Program (decoded, old schemas upgraded, validated);
the runtime compiles that (runtime/assemble.compile_loaded). See docs/FORMAT.md and docs/SECURITY.md.
"""
from __future__ import annotations

import base64
import json
import mmap
import os
import struct
from concurrent.futures import ThreadPoolExecutor

import torch

from ..version import __version__
from ..errors import LoadError
from . import limits
from .file_format import ALIGN, BACKEND_CHOICE_FILE, parse_choice, FORMAT, MAX_HEADER, SCHEMA_VERSION
from .file_format import ST_DTYPES as _ST_DTYPES
from .crc import blame_checksum, check_crc, crc_of
from .relocate import check_device_constants, relocate, saved_devices
from .expansion import check_expansion
from ..program import Program
from ..runtime.assemble import compile_loaded
from .compile_once import MethodCompiler
from . import code_cache, left_out_stubs
from .cached_methods import Mismatch, Recorder, Replayer
from .program_decoder import decode_function, decode_module
from .torch_files import raise_if_torch_file

def load(f, map_location=None, *, extra_files=None, check_integrity: bool = True, mmap: bool = False):
    """Load a program saved by ``tracejit.save``; returns a TracedFunction or TracedModule.

    ``map_location``: a device or string ("cpu", "cuda:0", "meta") to put the tensors on; without it each tensor
    goes back to the device it was saved from, as with ``torch.jit.load`` (LoadError where this machine lacks it).
    ``extra_files``: a dict whose keys name extra files to read back; their contents (bytes) are filled in.
    ``mmap``: map the weights from the file (copy-on-write) instead of reading them into memory.
    Faster for big files, but the file must then stay as it is while the program lives: if it is
    truncated or rewritten in place, touching a weight can kill the process (SIGBUS).
    Any problem with the file raises ``tracejit.LoadError`` saying what and where.
    """
    return _read_program(f, map_location, extra_files, check_integrity, mmap, compile_it=True)


def read_program(f, map_location=None, *, check_integrity: bool = True, mmap: bool = False) -> Program:
    """The Program (tracejit/program.py) a file saved by ``tracejit.save`` holds: decoded, upgraded to the
    current schema and validated, with the file's tensors; nothing is compiled (``load`` compiles it).
    Arguments and errors as ``load``'s."""
    return _read_program(f, map_location, None, check_integrity, mmap, compile_it=False)


def _read_program(f, map_location, extra_files, check_integrity: bool, mmap: bool, compile_it: bool):
    buf, data_crc = _read(f, mmap, check_integrity)
    try:
        raise_if_torch_file(buf)   # a TorchScript / torch.save file: name it and the migration route
        if not compile_it:
            return _decoded(buf, map_location, extra_files, check_integrity, data_crc)[0]
        where = code_cache.directory()
        key = code_cache.key(buf, _header_length(buf), map_location) if where is not None else None
        entries = code_cache.read(where, key)
        if entries is not None:   # compiled by an earlier load of this very header (code_cache.py)
            try:
                return _compiled(buf, map_location, extra_files, check_integrity, data_crc, Replayer(entries))
            except LoadError:
                raise   # the file's own fault (its weights' CRC): the same without the cache
            except (Mismatch, KeyError, IndexError, TypeError, ValueError, AttributeError):
                pass   # an entry that does not answer this load: never a reason for a good file to fail
        recorder = Recorder() if key is not None and code_cache.writable(where) else None
        loaded = _compiled(buf, map_location, extra_files, check_integrity, data_crc, recorder)
        if recorder is not None and recorder.cacheable:
            code_cache.write(where, key, recorder.entries)
        return loaded
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


def _decoded(buf, map_location, extra_files, check_integrity: bool, data_crc, validated: bool = False):
    """(the Program, the document's ``program`` object), on ``map_location``."""
    program, document = _decode(buf, map_location, extra_files, check_integrity, data_crc, validated)
    if map_location is not None:
        relocate(program, map_location)
    else:
        check_device_constants(program)
    return program, document


def _compiled(buf, map_location, extra_files, check_integrity: bool, data_crc, compiler):
    """The loaded object. ``compiler``: a code cache Recorder (or None: compile_method) on a miss, a Replayer
    on a hit, which then skips the checks the document passed when it was recorded."""
    replay = isinstance(compiler, Replayer)
    program, document = _decoded(buf, map_location, extra_files, check_integrity, data_crc, validated=replay)
    method_compiler = MethodCompiler(compiler)
    loaded = compile_loaded(program, method_compiler)
    for _, _, graph in program.graphs():   # the validator's bindings its code generation did not ask for
        plan = getattr(graph, "call_budget", None)
        if plan is not None:
            plan.bound_at_load.clear()
    if replay and compiler.used != len(compiler.entries):
        raise Mismatch(f"{len(compiler.entries) - compiler.used} cached functions were not asked for")
    if document.get("kind") == "module":
        left_out_stubs.install(loaded, left_out_stubs.read(document))   # methods save left out (left_out.py)
    return _with_backend_choice(loaded, document)


def _header_length(buf) -> int:
    return struct.unpack("<Q", bytes(buf[:8]))[0] if len(buf) >= 8 else -1


def _read(f, use_mmap: bool = False, want_crc: bool = True):
    """(buffer, CRC-32 of its bytes after the header or None). Files are read into private anonymous
    memory of our own (not zero-filled up front, unlike bytearray), so a later truncation or
    rewrite of the file cannot reach the weights, nor a forked worker's write the parent's; ``use_mmap``
    maps the file instead."""
    if isinstance(f, (str, os.PathLike)):
        path = os.fspath(f)
        try:
            with open(path, "rb", buffering=0) as fh:
                size = os.fstat(fh.fileno()).st_size
                if size == 0:
                    raise LoadError(f"{path}: the file is empty")
                if use_mmap:
                    return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY), None
                buf = _private_memory(size)
                got, data_crc = _read_into(fh, buf, size, want_crc)
                if got != size:
                    raise LoadError(f"{path}: the file changed size while it was read ({got} of {size} bytes)")
                return buf, data_crc
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
        if len(data) < 8:
            return bytearray(data), None
        buf = _private_memory(len(data))   # page-aligned, as a file's: its aligned tensors need no copy
        buf[:] = data
        return buf, None
    raise TypeError(f"tracejit.load expects a path or a binary file object; got {type(f).__name__}")


_CHUNK = 16 * 1024 * 1024
# private anonymous memory: Python's mmap(-1, n) is MAP_SHARED, i.e. shared memory, whose first touch of each page
# costs more (BERT-base's 211 MB of weights: read in ~150 ms there, ~112 ms into private pages, as into torch.empty)
_PRIVATE = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)


def _private_memory(size: int):
    """``size`` bytes of the process's own memory, not zero-filled up front (unlike bytearray)."""
    return mmap.mmap(-1, size, flags=_PRIVATE) if _PRIVATE else mmap.mmap(-1, size)


def _read_into(fh, buf, size: int, want_crc: bool):
    """Read the file into ``buf`` in chunks; the CRC of the bytes after the header runs on a
    second thread while the next chunk is read. Returns (bytes read, that CRC or None). A file of one chunk
    is read on this thread alone; its CRC is then summed in one pass by ``crc.check_crc`` (no thread to start,
    no CRCs to combine)."""
    view = memoryview(buf)
    if size <= _CHUNK:
        n = 0
        while n < size:
            k = fh.readinto(view[n:])
            if not k:
                break
            n += k
        return n, None
    n, data_start, crc, running = 0, None, 0, None
    with ThreadPoolExecutor(1) as pool:
        while n < size:
            k = fh.readinto(view[n:min(size, n + _CHUNK)])
            if not k:
                break
            if data_start is None and n + k >= 8:
                data_start = 8 + struct.unpack("<Q", bytes(view[:8]))[0]
            lo = max(n, data_start) if data_start is not None else n + k
            if want_crc and lo < n + k:
                if running is not None:
                    crc = running.result()
                running = pool.submit(crc_of, [view[lo:n + k]], crc)
            n += k
        if running is not None:
            crc = running.result()
    ok = want_crc and data_start is not None and data_start <= n
    return n, (crc, data_start) if ok else None


def read_header(buf, size: int | None = None, validated: bool = False):
    """``(header length, safetensors header, program document)`` of a tracejit file: ``buf`` holds its
    bytes (the whole file, or its first 8 + header-length bytes, with ``size`` the file's size). Checks
    the length field, the header's limits and JSON, the format marker and the schema version; raises
    LoadError. The CLI's ``inspect`` reads the document through this too. ``validated``: these very bytes
    passed before (a code-cache hit): JSON objects are not searched for repeated keys again."""
    pairs = None if validated else _no_duplicates
    size = len(buf) if size is None else size
    if size < 8:
        raise LoadError(f"the file is {size} bytes long: too short to be a tracejit program")
    header_len = struct.unpack("<Q", bytes(buf[:8]))[0]
    if header_len > size - 8:
        raise LoadError(f"the header claims {header_len} bytes but the file has {size - 8} after its length "
                        "field (truncated, or not a tracejit file)")
    if header_len > MAX_HEADER:   # a whole file, but over the limit: say so, not "truncated" (round 25)
        raise LoadError(f"the header claims {header_len} bytes, more than the {MAX_HEADER} a tracejit file's header "
                        "(its program document and extra files) may hold")
    raw_header = bytes(buf[8:8 + header_len])
    if raw_header.count(b'"data_offsets"') > limits.MAX_TENSORS:
        raise LoadError(f"the file holds more than {limits.MAX_TENSORS} tensors")
    limits.check_header_text(raw_header)
    try:
        header = json.loads(raw_header.decode("utf-8"), object_pairs_hook=pairs)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LoadError(f"the file header is not valid JSON ({e}); not a tracejit file, or damaged") from None
    if not isinstance(header, dict) or not isinstance(header.get("__metadata__"), dict) \
            or not isinstance(header["__metadata__"].get("tracejit"), str):
        raise LoadError("this is not a tracejit program: the safetensors metadata has no 'tracejit' entry")
    limits.check_document_text(header["__metadata__"]["tracejit"])
    try:
        doc = json.loads(header["__metadata__"]["tracejit"], object_pairs_hook=pairs)
    except json.JSONDecodeError as e:
        raise LoadError(f"the program document is not valid JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise LoadError("this is not a tracejit program (wrong format marker)")
    if isinstance(doc.get("program"), dict):
        limits.check_program(doc["program"])   # counts first: before anything costs time per item
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise LoadError(f"bad schema version {version!r}")
    if version > SCHEMA_VERSION:
        raise LoadError(f"this file uses tracejit schema version {version}, newer than this tracejit "
                        f"({__version__}) reads (version {SCHEMA_VERSION}); upgrade tracejit to load it")
    return header_len, header, doc


def _decode(buf, map_location, extra_files, check_integrity: bool, data_crc=None, validated: bool = False):
    """(the Program, the document's ``program`` object). ``validated``: the code cache holds this header's
    methods, so it passed the checks before (code_cache.py): the per-node checks are skipped."""
    size = len(buf)
    try:
        header_len, header, doc = read_header(buf, validated=validated)
    except LoadError as e:
        if check_integrity:
            blame_checksum(buf, data_crc, e)
        raise
    if check_integrity:
        check_crc(buf, header_len, doc.get("crc32"), data_crc)
    data_start = 8 + header_len
    program = doc.get("program")
    if not isinstance(program, dict):
        raise LoadError("the file holds no program")
    devices = saved_devices(program, restore=map_location is None)
    tensors = _tensors(header, buf, data_start, size, map_location, devices)
    budget = limits.max_elements(size)
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
        return decode_function(program, tensors, budget, doc["schema_version"], validated), program
    if kind == "module":
        limits.check_visits(program)
        if not validated:
            check_expansion(program)
        decoded = decode_module(program, tensors, budget, doc["schema_version"], validated)
        left_out_stubs.read(program)   # its left-out methods' entries checked (left_out_stubs.py)
        return decoded, program
    raise LoadError(f"unknown program kind {kind!r}")


def _with_backend_choice(loaded, program: dict):
    """The backend ``optimize_for_inference(backend="auto")`` chose, when it was saved with the program
    (auto_backend.py; docs/FORMAT.md): ``loaded.saved_backend_choice``, so auto does not measure again."""
    stored = program.get("extra_files")
    if isinstance(stored, dict) and BACKEND_CHOICE_FILE in stored:
        try:
            raw = base64.b64decode(stored[BACKEND_CHOICE_FILE], validate=True)
            loaded.__dict__["saved_backend_choice"] = parse_choice(raw)
        except (ValueError, TypeError) as e:
            raise LoadError(f"extra file {BACKEND_CHOICE_FILE!r} is damaged: {e}") from None
    return loaded


def _no_duplicates(pairs):
    d = dict(pairs)
    if len(d) != len(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise LoadError(f"the file names {k[:80]!r} twice")
            seen.add(k)
    return d


def _tensors(header: dict, buf, data_start: int, size: int, map_location, saved_on: dict) -> dict:
    """The file's tensors by key, on ``map_location``, else each on the device ``saved_on`` names, else the CPU."""
    mapped = torch.device(map_location) if map_location is not None else None
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
        nbytes = numel * dtype.itemsize
        if not 0 <= begin <= end <= data_len or end - begin != nbytes:
            raise LoadError(f"{where}: its data ({begin}..{end}) does not fit its shape {shape} and dtype, or lies "
                            f"outside the file's {data_len} data bytes")
        spans.append((begin, end, key))
        device = mapped if mapped is not None else saved_on.get(key)
        if device is not None and device.type == "meta":
            out[key] = torch.empty(shape, dtype=dtype, device="meta")
            continue
        if numel == 0:
            t = torch.empty(shape, dtype=dtype)
        else:
            t = _aligned(torch.frombuffer(buf, dtype=torch.uint8, count=nbytes, offset=data_start + begin), dtype, shape)
        out[key] = t.to(device) if device is not None else t
    spans.sort()
    for (b0, e0, k0), (b1, e1, k1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise LoadError(f"tensors {k0[:60]!r} and {k1[:60]!r} overlap in the file")
    return out


def _aligned(data: torch.Tensor, dtype, shape) -> torch.Tensor:
    """The file's bytes ``data`` as a tensor of ``dtype`` and ``shape``: a view of the buffer where it starts at a
    multiple of ``ALIGN`` bytes (what the writer does for most tensors), else a copy in memory torch allocates so
    (an older file, a tensor whose size is not a multiple of ALIGN, a file read from a file object): a weight that
    is not aligned sends oneDNN's convolutions down another path, which answers 1-3 ulps from eager."""
    if data.data_ptr() % ALIGN == 0:
        return data.view(dtype).view(shape)
    t = torch.empty(shape, dtype=dtype)
    t.view(-1).view(torch.uint8).copy_(data)
    return t
