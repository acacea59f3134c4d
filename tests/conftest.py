"""Set-up for the whole suite: tests/ on sys.path (shared helper modules such as filesurgery.py), and
every trace-time pass verified as it runs (passes/pipeline.py reads TRACEJIT_VERIFY_PASSES on import)."""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

os.environ.setdefault("TRACEJIT_VERIFY_PASSES", "1")
# the code cache (serialize/code_cache.py) of this test process: its own, empty at the start, removed at exit,
# so a second load of a file in the suite takes the cached path and the user's cache is never touched
_CACHE = tempfile.mkdtemp(prefix="tracejit-test-cache-")
os.environ["TRACEJIT_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, True)
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import pytest  # noqa: E402
import torch  # noqa: E402

_NO_CUDA = "no CUDA device here (torch.cuda.is_available() is False); tests/device covers device logic with meta tensors"


@pytest.fixture(params=[pytest.param("cpu", id="cpu"),
                        pytest.param("cuda", id="cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                                 reason=_NO_CUDA))])
def device(request) -> torch.device:
    """The device a test runs on: the CPU always, and CUDA where one is present (skipped otherwise).
    A test that takes it builds its inputs and modules there and compares with eager on the same device."""
    return torch.device(request.param)


@pytest.fixture
def no_code_cache(monkeypatch):
    """For a test that edits the validator's tables (an op allowed, a rule removed): the code cache assumes
    them as tracejit's source has them (serialize/code_cache.py), so this test loads without it."""
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", "")


from serial_tests import NOT_SERIAL, SERIAL  # noqa: E402  (the tests `make test` runs alone, after the parallel phase)


def pytest_collection_modifyitems(config, items):
    for item in items:
        where = os.path.relpath(str(item.path), _HERE).replace(os.sep, "/")
        if where.startswith(SERIAL) and where not in NOT_SERIAL:
            item.add_marker(pytest.mark.serial)
