"""`make test` runs the suite in three pytest-xdist workers, then the tests marked serial alone
(tests/serial_tests.py). A test that bounds time or CPU seconds, or counts threads, must run alone: a neighbour's
work eats its budget. Default-deny: every test file that reads a clock or a thread count is in SERIAL, or listed here with the
reason it is no bound (a new one fails this test until someone decides)."""
from __future__ import annotations

import os
import re

from serial_tests import NOT_SERIAL, SERIAL

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READS_TIME = re.compile(r"perf_counter|process_time|monotonic\(|getrusage|RLIMIT_|get_num_threads|active_count|"
                        r"threading\.enumerate")
NOT_A_BOUND = {
    "conftest.py": "marks the serial tests",
    "serial_tests.py": "SERIAL itself",
    "arch/test_serial_tests.py": "this test",
    "compat/cases_model_code.py": "a clock read as a traced pattern (it must be refused), not a bound",
    "guards/state_patterns.py": "clock reads as traced patterns, not bounds",
    "guards/test_not_forward_code.py": "clock reads as traced patterns, not bounds",
    "guards/test_state_patterns.py": "clock reads as traced patterns, not bounds",
    "models/model_corpus.py": "records how long a trace took for the report; asserts nothing on it",
    "viewer/test_sizes.py": "mentions CPU seconds in a docstring only",
    "export/test_ort_backend.py": "compares onnxruntime's thread count with torch's in the same process",
    "export/test_openvino_backend.py": "compares OpenVINO's thread count with torch's in the same process",
    "passes/test_linear_kernels.py": "sets torch's threads for a case and restores them",
    "serialize/test_bad_files.py": "names torch.set_num_threads as a function a file may not call",
    "serve/test_serve_hf.py": "sets one thread while its children serve, and restores it",
    "export/test_guard_outputs.py": "sets one thread for a case and restores it",
    "passes/test_linear_timing.py": "sets torch's threads for a case and restores them; the timings it judges are injected",
    "passes/test_paired_timing.py": "deadlines far from the work they cut (a miss under load is still a miss); sets torch's threads and restores them",
}


def test_every_file_that_reads_a_clock_or_a_thread_count_is_serial_or_says_why_not():
    unlisted = []
    for root, _, files in os.walk(TESTS):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            where = os.path.relpath(path, TESTS).replace(os.sep, "/")
            with open(path, encoding="utf-8") as f:
                if not READS_TIME.search(f.read()):
                    continue
            if not where.startswith(SERIAL) and where not in NOT_A_BOUND:
                unlisted.append(where)
    assert unlisted == [], (f"these test files read a clock or a thread count but run in the parallel phase: "
                            f"{unlisted}; add them to tests/conftest.py SERIAL, or to NOT_A_BOUND here with the reason")


def test_the_reasons_name_files_that_exist():
    missing = [w for w in NOT_A_BOUND if not os.path.exists(os.path.join(TESTS, w))]
    assert missing == []


# what a file that bounds nothing may not use: a clock or thread count, a capped child (its CPU seconds), a CLI run
BOUNDS = re.compile(READS_TIME.pattern + r"|run_child|round_problems|run_cli|subprocess|cpu_s|CPU_S")


def test_files_let_out_of_the_serial_phase_bound_nothing():
    """tests/serial_tests.py NOT_SERIAL: files of a SERIAL folder that run in the parallel phase. Each exists, is in
    a SERIAL folder (else it needs no entry), and reads no clock or thread count and starts no capped child."""
    wrong = []
    for where in NOT_SERIAL:
        path = os.path.join(TESTS, where)
        if not os.path.exists(path) or not where.startswith(SERIAL):
            wrong.append(f"{where}: no such file in a SERIAL folder")
            continue
        with open(path, encoding="utf-8") as f:
            found = BOUNDS.search(f.read())
        if found:
            wrong.append(f"{where}: uses {found.group(0)!r}")
    assert wrong == []


def test_the_serial_phase_collects_every_file_that_holds_serial_tests():
    """`make test`'s serial phase collects only ``serial_files`` (tests/serial_tests.py): the files under SERIAL but not
    in NOT_SERIAL, the same rule tests/conftest.py marks by. A test marked serial by hand elsewhere would run in
    neither phase, so no test file marks one itself; and the list holds the serial files and none of NOT_SERIAL."""
    from serial_tests import serial_files
    listed = {os.path.relpath(p, TESTS).replace(os.sep, "/") for p in serial_files(TESTS)}
    assert "security/test_tool_files.py" in listed and "ir/test_graph_printer.py" in listed
    assert not listed & set(NOT_SERIAL)
    by_hand = []
    for root, dirs, files in os.walk(TESTS):
        for name in files:
            where = os.path.relpath(os.path.join(root, name), TESTS).replace(os.sep, "/")
            if name.endswith(".py") and where not in NOT_A_BOUND:
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    if re.search(r"mark\.serial\b|\bmark\(\s*['\"]serial", f.read()):
                        by_hand.append(where)
    assert by_hand == [], f"{by_hand} mark tests serial themselves: add them to tests/serial_tests.py SERIAL instead"
