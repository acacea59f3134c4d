"""Set-up for the whole suite: tests/ on sys.path (shared helper modules such as filesurgery.py), and
every trace-time pass verified as it runs (passes/pipeline.py reads TRACEJIT_VERIFY_PASSES on import)."""
from __future__ import annotations

import os
import sys

os.environ.setdefault("TRACEJIT_VERIFY_PASSES", "1")
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
