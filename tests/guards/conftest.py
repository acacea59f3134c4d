import os
import sys

# patterns.py lives here; trace_testlib (marker lines) lives in tests/trace
sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "trace"))
