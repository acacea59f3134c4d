PYTHON := python3
VENV   := .venv
VPY    := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
BASE   := $(VENV)/.installed-base
TEST   := $(VENV)/.installed-test
BENCH  := $(VENV)/.installed-bench

.PHONY: venv demo test bench test-torch

venv: $(BASE)

# torch is pinned and installed first: a bare `torch` requirement would
# resolve to the multi-GB CUDA build.  `make demo` installs only tracejit and
# what it needs at run time; `make test` adds the test extras, `make bench`
# the peers it times (ONNX Runtime, transformers).
$(BASE): pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e .
	touch $(BASE)

# torchvision 0.28.0 (for torch 2.13) for the detection model tests, with --no-deps (its torch==2.13.0
# requirement must never let pip fetch a CUDA torch) and in a folder of its own: its C++ ops do not load
# beside the CPU torch, so a plain `import torchvision` (transformers tries one when it finds it) fails.
# tests/models/torchvision_ops.py puts the folder on sys.path and defines those ops in pure torch.
# timm 1.0.31 (tests/models/test_timm_models.py, bench/zoo_models.py) goes in the same folder: it imports torchvision.
$(TEST): $(BASE)
	$(PIP) install -q -e '.[test]'
	$(PIP) install -q --no-deps --target $(VENV)/vision-tests torchvision==0.28.0 timm==1.0.31
	$(PIP) install -q pillow
	touch $(TEST)

$(BENCH): $(TEST)
	$(PIP) install -q -e '.[test,bench]'
	touch $(BENCH)

demo: $(BASE)
	$(VPY) examples/demo.py
	$(VENV)/bin/tracejit inspect demo_model.tjit

# Two phases: first every test but those marked serial, in three pytest-xdist workers at one torch thread each (CI
# has 2 cores: many tests wait on a child process, an export or a browser, and a third worker fills those waits;
# 449-497 s at three against 497-506 s at two on a 2-core VM that drifts by as much within the hour; tests at one
# thread also cover that setting), then
# the serial ones (CPU-second and wall-time bounds, thread counts: tests/serial_tests.py) alone, at torch's
# default threads. Either phase failing, or collecting nothing (pytest's exit 5), fails the target. The serial
# phase collects only the files that hold serial tests (tests/serial_tests.py prints them; the marks are the same):
# collecting the whole suite again cost ~15 CPU seconds of imports for tests it deselected.
test: $(TEST)
	OMP_NUM_THREADS=1 $(VPY) -m pytest -q -n 3 -m "not serial" tests
	$(VPY) -m pytest -q -m serial $$($(VPY) tests/serial_tests.py)

bench: $(BENCH)
	$(VPY) bench/bench_core.py

# The suite on another torch (2.11 to 2.15): its own venv .venv-torch-$(TORCH), see the script.
test-torch:
	@test -n "$(TORCH)" || { echo "usage: make test-torch TORCH=2.15.0"; exit 2; }
	scripts/test_torch.sh $(TORCH)
