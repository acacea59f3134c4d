"""A user's settings module for tests/guards/test_global_reads.py: read as ``global_settings.SCALE`` and
``global_settings.Defaults.EPS`` by traced code (their guards: trace/global_reads.py)."""
SCALE = 2.0
SIZES = [2, 3]


class Defaults:
    EPS = 0.5
    MODE = "add"
