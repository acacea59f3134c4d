"""Export / inference tests: the onnx extra must be installed (it is part of the test extra)."""
from __future__ import annotations

import importlib.util
import os
import sys

_MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models")
if _MODELS not in sys.path:
    sys.path.insert(0, _MODELS)   # the real-model corpus (model_corpus.py)

_NEEDED = ("onnx", "onnx_ir", "onnxscript", "onnxruntime")
if any(importlib.util.find_spec(m) is None for m in _NEEDED):
    collect_ignore_glob = ["test_*.py"]
