#!/usr/bin/env bash
# The one command a session with a GPU runs (issue 23): the suite's CUDA tests and bench/bench_gpu.py,
# results written under $OUT (default: gpu-results/).
#
#   OUT=/some/dir scripts/gpu_check.sh                 # PYTHON=... to pick the interpreter
#   BENCH_ARGS="--rounds 3 --calls 10" scripts/gpu_check.sh
#
# Writes: device.txt (GPU, driver, torch), pytest-cuda.txt (every test the `device` fixture runs on
# cuda, plus tests/device), bench_gpu.md and bench_gpu.json. Exits 2 without CUDA.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-gpu-results}"
mkdir -p "$OUT"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

"$PYTHON" - > "$OUT/device.txt" <<'PY' || { cat "$OUT/device.txt"; exit 2; }
import sys, torch
print("torch", torch.__version__, "CUDA build", torch.version.cuda)
if not torch.cuda.is_available():
    print("no CUDA device: torch.cuda.is_available() is False"); sys.exit(2)
for i in range(torch.cuda.device_count()):
    print(f"cuda:{i}", torch.cuda.get_device_name(i), torch.cuda.get_device_properties(i).total_memory // 2**20, "MiB")
PY
command -v nvidia-smi >/dev/null && nvidia-smi >> "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"

echo "== CUDA tests (the device fixture's cuda cases, and tests/device)"
"$PYTHON" -m pytest -q -p no:cacheprovider -rs tests -k "cuda" > "$OUT/pytest-cuda.txt" 2>&1
tests_rc=$?
"$PYTHON" -m pytest -q -p no:cacheprovider -rs tests/device >> "$OUT/pytest-cuda.txt" 2>&1
device_rc=$?
tail -n 3 "$OUT/pytest-cuda.txt"

echo "== bench/bench_gpu.py"
# shellcheck disable=SC2086  (BENCH_ARGS is a list of options)
"$PYTHON" bench/bench_gpu.py --json "$OUT/bench_gpu.json" ${BENCH_ARGS:-} > "$OUT/bench_gpu.md" 2> "$OUT/bench_gpu.log"
bench_rc=$?
cat "$OUT/bench_gpu.md"
echo "pytest cuda: rc $tests_rc, tests/device: rc $device_rc, bench: rc $bench_rc (details under $OUT)"
[[ $tests_rc -eq 0 && $device_rc -eq 0 && $bench_rc -eq 0 ]]
