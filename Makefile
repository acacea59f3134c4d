PYTHON := python3
VENV   := .venv
VPY    := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed

.PHONY: venv demo test bench

venv: $(STAMP)

# torch is pinned and installed first: a bare `torch` requirement would
# resolve to the multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test]'
	touch $(STAMP)

demo: venv
	$(VPY) examples/demo.py
	$(VENV)/bin/tracejit inspect demo_model.tjit

test: venv
	$(VPY) -m pytest -q tests

bench: venv
	$(VPY) bench/bench_core.py
