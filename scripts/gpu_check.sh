#!/usr/bin/env bash
# The one command a session with a GPU runs (issue 23): the suite's CUDA tests and bench/bench_gpu.py,
# everything written under $OUT (default: gpu-results/), in under 8 minutes in all.
#
#   OUT=/some/dir scripts/gpu_check.sh                 # PYTHON=... to pick the interpreter
#   TOTAL_S=480 BENCH_ARGS="--rounds 3" scripts/gpu_check.sh
#   PARTS="tests bench" PYTEST_ARGS="-n 4" scripts/gpu_check.sh    # parts: tests bench profile siblings compile (default: all)
#   COLUMNS="eager jit_freeze_ofi tracejit_cuda_graphs" ROWS="bert/1/fp32" scripts/gpu_check.sh   # fewer bench cells
#   PROFILE_ARGS="--part kernels" scripts/gpu_check.sh   # one part of the profile
#   PARTS="tests zoo" ZOO_MODELS="resnet50,bert" scripts/gpu_check.sh   # the zoo on the GPU, two models
#
# Parts, each under `timeout` (its own cap, and never past the total), each run even when the one
# before failed or timed out:
#   device.txt          GPU, driver, torch (stops here, status 2, without CUDA)
#   pytest-cuda.txt     tests/device/test_cuda_graphs_on_gpu.py (the CUDA-graph backend on a real GPU) and every
#                       test of the suite the `device` fixture runs on cuda
#   bench_gpu.md/.json  bench/bench_gpu.py: the six rows, every column but torch.compile's (rows are
#                       written as they finish: a part cut short keeps the rows it did)
#   zoo_cuda.md/.jsonl  bench/bench_zoo.py --device cuda (issue 25 on the GPU): ZOO_MODELS (default: 16 families)
#                       at batch 1 and 8, eager / jit freeze / tracejit / optimize_for_inference / backend="auto" /
#                       cuda_graphs, errors against eager and float64 (rows are appended as they finish)
#   bisect.md           bench/pass_time_bisect.py --device cuda: the default backend without each CUDA pass in turn,
#                       against the traced program, on BISECT_MODELS at batch 1 (the zoo rows where it read slower
#                       than the traced program on 2026-11-30: which pass does not pay at small sizes)
#   profile.md          bench/gpu_peer_profile.py: CUDA kernels per call of eager / jit freeze / tracejit, the cuDNN
#                       conv fusion and BERT linear-layout experiments
#   siblings.md         bench/gpu_sibling_linears.py: query, key and value as three GEMMs or one batched GEMM
#   bench_compile.md/.json  torch.compile default and reduce-overhead at batch 1 beside eager and tracejit's
#                       CUDA graphs (compiles take minutes: last, with what time is left; COMPILE_ROWS and
#                       COMPILE_COLUMNS pick other rows and peers, e.g. batch 32 beside every peer)
#   summary.txt         one line per part: status, seconds, the last line of what it printed
#   results.tgz         every file above in one archive (a device machine hands back at most 8 files)
# Exit status: 0 when every part passed, 1 otherwise, 2 without CUDA.
#
# DRY_RUN=1 runs the same parts on a machine without CUDA: the bench with --device cpu --dry-run (tiny
# models), pytest on tests/device only (its CUDA tests skip): the script's plumbing, not a measurement.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-gpu-results}"
TOTAL_S="${TOTAL_S:-470}"
mkdir -p "$OUT"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
failed=0

DRY=()
TESTS=(tests -k cuda)
if [[ "${DRY_RUN:-0}" == 1 ]]; then DRY=(--device cpu --dry-run); TESTS=(tests/device/test_cuda_graphs_on_gpu.py); fi
DRY_RUN="${DRY_RUN:-0}" "$PYTHON" - > "$OUT/device.txt" 2>&1 <<'PY'
import os, sys, torch
print("torch", torch.__version__, "CUDA build", torch.version.cuda)
if os.environ["DRY_RUN"] == "1":
    print("DRY RUN on the CPU: the plumbing only, nothing measured"); sys.exit(0)
if not torch.cuda.is_available():
    print("no CUDA device: torch.cuda.is_available() is False"); sys.exit(2)
for i in range(torch.cuda.device_count()):
    print(f"cuda:{i}", torch.cuda.get_device_name(i), torch.cuda.get_device_properties(i).total_memory // 2**20, "MiB")
PY
device_rc=$?
if [[ $device_rc -ne 0 ]]; then
  cat "$OUT/device.txt"
  echo "device: rc $device_rc: $(tail -n 1 "$OUT/device.txt")" >> "$SUMMARY"
  exit 2
fi
command -v nvidia-smi >/dev/null && nvidia-smi >> "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"
echo "device: ok: $(sed -n 2p "$OUT/device.txt")" >> "$SUMMARY"

# part NAME CAP_S LOG COMMAND...: run COMMAND under timeout (CAP_S, or what is left of TOTAL_S), output to LOG
part() {
  local name="$1" cap="$2" logfile="$3"; shift 3
  local left=$(( TOTAL_S - SECONDS ))
  (( left < cap )) && cap=$left
  if (( cap < 20 )); then
    echo "$name: not run (the ${TOTAL_S}s budget is spent)" | tee -a "$SUMMARY"
    failed=1
    return
  fi
  echo "== $name (at most ${cap}s)"
  local t0=$SECONDS
  timeout --kill-after=10 "$cap" "$@" > "$logfile" 2> "${logfile%.*}.log"
  local rc=$?
  local what="rc $rc"
  (( rc == 124 || rc == 137 )) && what="TIMED OUT after ${cap}s (rc $rc)"
  (( rc != 0 )) && failed=1
  echo "$name: $what, $(( SECONDS - t0 ))s: $(grep -v '^$' "$logfile" | tail -n 1)" | tee -a "$SUMMARY"
}

PARTS="${PARTS:-tests zoo bisect bench profile siblings compile}"
# the CUDA tests in 14 workers where pytest-xdist is installed (134 s on an H200 host's 16 cores on 2026-11-30; 8
# workers passed the part's 170 s cap), one line per test as it ends (-vv: a part cut off still names what ran and
# failed) and, with pytest-timeout, no test past 120 s
if [[ -z "${PYTEST_ARGS+set}" ]] && "$PYTHON" -c "import xdist" 2>/dev/null; then
  PYTEST_ARGS="-n 14 -vv -rfE --tb=short"
  "$PYTHON" -c "import pytest_timeout" 2>/dev/null && PYTEST_ARGS="$PYTEST_ARGS --timeout 120"
fi
wanted() { [[ " $PARTS " == *" $1 "* ]]; }

# -k cuda: every test the `device` fixture runs on cuda ([cuda]), and test_cuda_graphs*.py's (tests/device, tests/backends)
# (test_cuda_models.py, test_cuda_paths.py: real models and device paths on the GPU)
# shellcheck disable=SC2086  (PYTEST_ARGS and BENCH_ARGS are lists of options)
wanted tests && part "pytest: the suite's cuda tests" "${TESTS_S:-200}" "$OUT/pytest-cuda.txt" \
  "$PYTHON" -m pytest -q -p no:cacheprovider -rs --durations=15 ${PYTEST_ARGS:-} "${TESTS[@]}"
# shellcheck disable=SC2086
wanted bench && part "bench_gpu.py (every column but torch.compile's)" "${BENCH_S:-230}" "$OUT/bench_gpu.md" \
  "$PYTHON" bench/bench_gpu.py "${DRY[@]}" --json "$OUT/bench_gpu.json" ${ROWS:+--rows $ROWS} \
  --columns ${COLUMNS:-eager eager_cuda_graph jit_trace jit_freeze_ofi ort_cuda tracejit_trace tracejit_ofi \
            tracejit_cuda_graphs tracejit_cuda_graphs_bf16} ${BENCH_ARGS:-}
ZOO_DEFAULT="resnet50,mobilenet_v3_small,efficientnet_b0,convnext_tiny,vit_tv,swin_tv,bert,gpt2,t5,whisper_encoder,\
deit_tiny,levit_128s,fasterrcnn_mobilenet,densenet121,regnet_y_400mf,llama"
ZOO_RUN=(--device cuda --rounds "${ZOO_ROUNDS:-5}")
[[ "${DRY_RUN:-0}" == 1 ]] && ZOO_RUN=(--device cpu --quick) && ZOO_DEFAULT=resnet18
wanted zoo && part "bench_zoo.py --device cuda (issue 25 on the GPU)" "${ZOO_S:-240}" "$OUT/zoo_cuda.md" \
  "$PYTHON" bench/bench_zoo.py "${ZOO_RUN[@]}" --no-compile --threads 1 --batches "${ZOO_BATCHES:-1,8}" \
  --models "${ZOO_MODELS:-$ZOO_DEFAULT}" --rows "$OUT/zoo_cuda.jsonl"
BISECT_RUN=(--device cuda --rounds 5)
BISECT_DEFAULT="convnext_tiny,vit_tv,deit_tiny,whisper_encoder,bert"
[[ "${DRY_RUN:-0}" == 1 ]] && BISECT_RUN=(--device cpu --rounds 2 --target 0.005) && BISECT_DEFAULT=resnet18
wanted bisect && part "pass_time_bisect.py --device cuda (which CUDA pass pays at small sizes)" "${BISECT_S:-120}" \
  "$OUT/bisect.md" "$PYTHON" bench/pass_time_bisect.py "${BISECT_MODELS:-$BISECT_DEFAULT}" 1 "${BISECT_RUN[@]}"
# (not in a dry run: it measures cuDNN and CUDA kernels, nothing the CPU has)
wanted profile && [[ "${DRY_RUN:-0}" != 1 ]] && part "gpu_peer_profile.py (kernels per call; cuDNN fusion and linear layout experiments)" \
  "${PROFILE_S:-90}" "$OUT/profile.md" "$PYTHON" bench/gpu_peer_profile.py ${PROFILE_ARGS:-}
wanted siblings && [[ "${DRY_RUN:-0}" != 1 ]] && part "gpu_sibling_linears.py (query, key, value as one batched GEMM)" \
  "${SIBLINGS_S:-90}" "$OUT/siblings.md" "$PYTHON" bench/gpu_sibling_linears.py
# shellcheck disable=SC2086
wanted compile && part "bench_gpu.py torch.compile" "${COMPILE_S:-150}" "$OUT/bench_compile.md" \
  "$PYTHON" bench/bench_gpu.py "${DRY[@]}" --json "$OUT/bench_compile.json" --rows ${COMPILE_ROWS:-resnet50/1/fp32 bert/1/fp32} \
  --columns ${COMPILE_COLUMNS:-eager compile compile_reduce_overhead tracejit_cuda_graphs} ${BENCH_ARGS:-}

echo
cat "$OUT/zoo_cuda.md" "$OUT/bisect.md" "$OUT/bench_gpu.md" "$OUT/siblings.md" "$OUT/bench_compile.md" 2>/dev/null
echo
echo "== summary ($SECONDS s; files under $OUT)"
cat "$SUMMARY"
(cd "$OUT" && tar czf results.tgz --exclude=results.tgz ./*)
exit $failed
