"""The tests `make test` runs alone, after the rest has run in two pytest-xdist workers (tests/conftest.py marks
them serial): they bound CPU seconds or wall time, or count threads, and a neighbour's work would eat their budgets.
A directory or a file, relative to tests/. tests/arch/test_serial_tests.py fails when a test file reads a clock or
a thread count and is neither here nor listed there with the reason it is no bound."""

SERIAL = ("security/", "threads/", "ir/test_graph_printer.py", "export/test_bench_ort_peer_bound.py",
          "passes/test_numexpr_groups.py", "serialize/test_save_effects.py")
