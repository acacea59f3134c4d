"""gc_pause.collector_paused: one pause shared by concurrent and nested holders, the caller's setting restored by
the last one to leave (tracejit/gc_pause.py)."""
from __future__ import annotations

import gc
import threading

import pytest

from tracejit.gc_pause import collector_paused


@pytest.fixture
def collector_setting():
    was = gc.isenabled()
    yield
    gc.enable() if was else gc.disable()


@pytest.mark.parametrize("enabled", [True, False])
def test_nested_pauses_restore_the_callers_setting_on_the_last_exit(collector_setting, enabled):
    gc.enable() if enabled else gc.disable()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()   # the outer holder is still inside
    assert gc.isenabled() is enabled


def test_overlapping_threads_keep_the_collector_off_until_the_last_leaves(collector_setting):
    gc.enable()
    inside, leave, states = threading.Barrier(3), threading.Event(), []

    def holder(wait_for):
        with collector_paused():
            inside.wait()
            wait_for.wait()
            states.append(gc.isenabled())

    first_may_leave = threading.Event()
    threads = [threading.Thread(target=holder, args=(first_may_leave,)), threading.Thread(target=holder, args=(leave,))]
    for t in threads:
        t.start()
    inside.wait()                  # both inside
    first_may_leave.set()
    threads[0].join()
    assert not gc.isenabled()      # the second holder is still inside: the first did not turn it back on
    leave.set()
    threads[1].join()
    assert states == [False, False] and gc.isenabled()


def test_an_exception_inside_still_restores(collector_setting):
    gc.enable()
    with pytest.raises(KeyError):
        with collector_paused():
            raise KeyError("x")
    assert gc.isenabled()
