#!/usr/bin/env bash
# Build a venv beside another torch release and run the whole suite on it.
#
#   scripts/test_torch.sh 2.15.0            (or: make test-torch TORCH=2.15.0)
#   TORCH_INDEX=<a PyTorch wheel index> scripts/test_torch.sh 2.12.1
#   scripts/test_torch.sh 2.15.0 --setup-only      (build the venv, run nothing)
#   scripts/test_torch.sh 2.15.0 tests/trace -x    (arguments after the version replace pytest's "tests")
#
# The venv is .venv-torch-<version> (gitignored) and is reused by later runs. CI stays on the
# pinned torch of `make test`; this script is how the range declared in pyproject.toml is proved.
#
# Wheels: PyPI's Linux torch wheels are CUDA builds: they import only beside their nvidia-* / cuda-*
# libraries (libtorch_cuda.so links cuDNN, cuBLAS, NCCL... even when no GPU is present), so this
# installs torch with its dependencies: about 5 GB a venv. Where PyTorch's CPU index is reachable,
# set TORCH_INDEX to it: the CPU wheel is ~200 MB and pulls no CUDA library.
#
# Test dependencies are installed one by one: one that does not support this torch (or Python)
# is reported and left out, and the tests that need it skip (importorskip) rather than fail.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TORCH="${1:-${TORCH:-}}"
if [[ -z "$TORCH" ]]; then
  echo "usage: $0 TORCH_VERSION   (e.g. 2.15.0)" >&2
  exit 2
fi
PYTHON="${PYTHON:-python3}"
VENV=".venv-torch-$TORCH"
VPY="$VENV/bin/python"
PIN="$VENV/torch-pin.txt"
MISSING="$VENV/left-out.txt"

# The machine-wide pip constraints may cap torch below the version asked for: this script's own
# constraint file (torch pinned to the version under test) replaces them for every install below.
pip_install() { PIP_CONSTRAINT="$PIN" "$VPY" -m pip install -q --disable-pip-version-check "$@"; }

if [[ ! -f "$VENV/.installed" ]]; then
  test -x "$VPY" || "$PYTHON" -m venv "$VENV" || exit 1
  echo "torch==$TORCH" > "$PIN"
  : > "$MISSING"
  echo "== installing torch $TORCH into $VENV"
  if [[ -n "${TORCH_INDEX:-}" ]]; then
    pip_install "torch==$TORCH" --index-url "$TORCH_INDEX" || exit 1
  else
    pip_install "torch==$TORCH" || exit 1
  fi
  echo "== installing tracejit (editable) and its run-time dependencies"
  pip_install -e . || exit 1
  # The test extras, one at a time, read from pyproject.toml so the two lists cannot drift apart.
  mapfile -t extras < <("$VPY" - <<'PY'
import tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["optional-dependencies"]["test"]))
PY
)
  for req in "${extras[@]}"; do
    if ! pip_install "$req" >"$VENV/pip-last.log" 2>&1; then
      echo "$req" >> "$MISSING"
      echo "   left out: $req (does not install beside torch $TORCH: $(tail -n 1 "$VENV/pip-last.log"))"
    fi
  done
  touch "$VENV/.installed"
fi

# As `make test` does (Makefile, $(TEST)): torchvision 0.28.0 and timm 1.0.31 for the model tests, with --no-deps
# in a folder of their own that tests/models/torchvision_ops.py finds (sys.prefix/vision-tests; it defines
# torchvision's two C++ ops in pure torch where its library does not load beside this torch), and pillow, which
# torchvision imports. Without them the detection, timm and torchvision model tests skip on this torch.
if [[ ! -f "$VENV/.installed-vision" ]]; then
  echo "== installing torchvision and timm for the model tests into $VENV/vision-tests"
  if pip_install --no-deps --target "$VENV/vision-tests" torchvision==0.28.0 timm==1.0.31 >"$VENV/pip-last.log" 2>&1 \
      && pip_install pillow >>"$VENV/pip-last.log" 2>&1; then
    touch "$VENV/.installed-vision"
  else
    echo "torchvision==0.28.0 timm==1.0.31 pillow" >> "$MISSING"
    echo "   left out: torchvision, timm, pillow ($(tail -n 1 "$VENV/pip-last.log"))"
  fi
fi

if [[ "${2:-}" == "--setup-only" ]]; then exit 0; fi
"$VPY" -c "import torch, tracejit; print('torch', torch.__version__, '| tracejit imports from', tracejit.__file__)" || exit 1
if [[ -s "$MISSING" ]]; then
  echo "== test dependencies left out on torch $TORCH (their tests skip):"
  sed 's/^/   /' "$MISSING"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
echo "== make demo's steps on torch $TORCH"
# (in the venv's folder: demo.py writes demo_model.tjit where it runs, and runs of two versions may overlap)
(cd "$VENV" && bin/python ../examples/demo.py > demo.log 2>&1 && bin/tracejit inspect demo_model.tjit >> demo.log 2>&1)
demo_rc=$?
tail -n 3 "$VENV/demo.log"
echo "   demo: $([[ $demo_rc -eq 0 ]] && echo ok || echo "FAILED (rc $demo_rc, $VENV/demo.log)")"
echo "== pytest on torch $TORCH"
if [[ $# -gt 1 ]]; then targets=("${@:2}"); else targets=(tests); fi
"$VPY" -m pytest -q -p no:cacheprovider "${targets[@]}"
tests_rc=$?
[[ $demo_rc -eq 0 ]] && exit $tests_rc
exit 1
