"""Migration tests build TorchScript archives with torch.jit.trace in a temporary directory."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
