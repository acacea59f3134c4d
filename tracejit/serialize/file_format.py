"""The fixed names and numbers of a tracejit file (docs/FORMAT.md), apart from the writer (archive.py), so
the loader, a server's only need, imports neither the writer nor what it writes with (atomic_file.py)."""
from __future__ import annotations

import json

import torch

from .limits import MAX_HEADER  # noqa: F401  (part of the format: the largest header a loader reads)

FORMAT = "tracejit"
SCHEMA_VERSION = 3   # 3: the specializations table (serialize/specializations.py)
# the writer starts the data, and every tensor whose size is a multiple of it, at a multiple of ALIGN bytes; the
# loader copies a tensor it finds elsewhere to memory so aligned (torch's CPU allocator's alignment: oneDNN's
# convolutions take another code path for a weight that is not, and answer 1-3 ulps from eager)
ALIGN = 64
CRC_PLACEHOLDER = "00000000"   # the document's crc32 while the file's CRC is computed
# safetensors' dtype names
ST_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
             "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
             "BOOL": torch.bool, "C64": torch.complex64}
# the extra file holding optimize_for_inference(backend="auto")'s choice (auto_backend.py)
BACKEND_CHOICE_FILE = "tracejit.backend.json"
# the backends that choice may name (auto_backend.py's candidates, in the order it tries them)
BACKEND_CHOICES = ("traced", "torch", "cuda_graphs", "onnxruntime", "openvino")


def encode_choice(backend: str, report: str) -> str:
    """The extra file's text for auto_backend's choice ``backend`` and its ``report``."""
    return json.dumps({"backend": backend, "report": report}, sort_keys=True)


def parse_choice(raw: bytes | str) -> dict:
    """The saved choice ``{"backend", "report"}`` read back from a file's extra file; ValueError if malformed."""
    try:
        data = json.loads(raw)
    except (ValueError, TypeError) as e:
        raise ValueError(f"the saved backend choice is not JSON: {e}") from None
    if (not isinstance(data, dict) or data.get("backend") not in BACKEND_CHOICES
            or not isinstance(data.get("report", ""), str)):
        raise ValueError(f"the saved backend choice names no known backend (expected one of {BACKEND_CHOICES}); "
                         f"got {str(data)[:80]!r}")
    return {"backend": data["backend"], "report": data.get("report", "")}
