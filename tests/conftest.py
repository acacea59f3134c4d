"""Set-up for the whole suite: tests/ on sys.path (shared helper modules such as filesurgery.py), and
every trace-time pass verified as it runs (passes/pipeline.py reads TRACEJIT_VERIFY_PASSES on import)."""
from __future__ import annotations

import os
import sys

os.environ.setdefault("TRACEJIT_VERIFY_PASSES", "1")
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


from serial_tests import SERIAL  # noqa: E402  (the tests `make test` runs alone, after the parallel phase)


def pytest_collection_modifyitems(config, items):
    for item in items:
        where = os.path.relpath(str(item.path), _HERE).replace(os.sep, "/")
        if where.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)
