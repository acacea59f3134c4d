"""The tests `make test` runs alone, after the rest has run in three pytest-xdist workers (tests/conftest.py marks
them serial): they bound CPU seconds or wall time, or count threads, and a neighbour's work would eat their budgets.
A directory or a file, relative to tests/. tests/arch/test_serial_tests.py fails when a test file reads a clock or
a thread count and is neither here nor listed there with the reason it is no bound."""

SERIAL = ("security/", "threads/", "ir/test_graph_printer.py", "export/test_bench_ort_peer_bound.py",
          "passes/test_numexpr_groups.py", "serialize/test_save_effects.py")

# Files in a SERIAL folder that bound nothing (default-deny: a new file there is serial until listed here): they
# check in this process what a file may hold and what it computes; no child process, CPU seconds, clock or thread
# count (tests/arch/test_serial_tests.py holds them to that). They run in the parallel phase.
NOT_SERIAL = {
    "security/test_as_strided_files.py": "as_strided's size rule: load errors and eager's answers",
    "security/test_call_guard_files.py": "which call guards a file may hold: load errors",
    "security/test_contraction_counts.py": "work counts of an op's arguments: numbers, not seconds",
    "security/test_denied_ops.py": "string tests of the denied-op rule",
    "security/test_expansion.py": "the expansion bound in-process: counts of calls and paths",
    "security/test_generated_names.py": "generated names against eager and torch.jit.trace",
    "security/test_legit_roundtrip.py": "legitimate ops round-trip and compute eager's answer",
    "security/test_op_allowlist.py": "the allow-list's table",
    "security/test_op_outputs.py": "ops' output sizes against their rules",
    "security/test_round25_cache.py": "the code cache's entry and byte limits",
    "security/test_tool_escaping.py": "the tools' escaping of a file's strings, in-process",
    "security/test_vision_op_files.py": "torchvision ops' argument checks: load and guard errors",
}


def serial_files(tests: str) -> list:
    """The test files under ``tests`` that run in the serial phase: those under SERIAL but not in NOT_SERIAL,
    sorted. `make test`'s serial phase collects only these (collecting the whole suite to deselect all but them
    cost about 15 CPU seconds: torch, torchvision, hypothesis and transformers imported by files it never runs);
    tests/conftest.py's marks decide as before, and the parallel phase still collects every file."""
    import os
    found = []
    for root, dirs, files in os.walk(tests):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in files:
            where = os.path.relpath(os.path.join(root, name), tests).replace(os.sep, "/")
            if name.startswith("test_") and name.endswith(".py") and where.startswith(SERIAL) and where not in NOT_SERIAL:
                found.append(os.path.join(tests, where))
    return sorted(found)


if __name__ == "__main__":   # `python tests/serial_tests.py`: the serial phase's files, one a line, for the Makefile
    import os
    print("\n".join(serial_files(os.path.relpath(os.path.dirname(os.path.abspath(__file__))))))
