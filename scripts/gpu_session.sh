#!/usr/bin/env bash
# One GPU session, most important first, every result written under $OUT as it comes (the device
# tool's machine: torch 2.11 + nvcc, nothing to download). Usage: bash scripts/gpu_session.sh [SECONDS]
# The accept tests and the drop-in bench need GitPython, absent there: carry its wheels in .whl/
# (pip download --no-deps --only-binary=:all: -d .whl GitPython gitdb smmap; call with carry [".whl"]).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/kevin-gpu-out}"; mkdir -p "$OUT"
BUDGET="${1:-540}"; START=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
export PYTHONUNBUFFERED=1 KEVIN_GPU_LOG="$OUT/gpu-verdicts.jsonl"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
log() { echo "== $(date +%T) [$(left) s left] $*" | tee -a "$OUT/session.log"; }
phase() {  # phase NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  local avail; avail=$(left); (( avail < limit )) && limit=$avail
  (( limit < 15 )) && { log "$name: skipped (time)"; return; }
  log "$name (limit ${limit}s)"
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee "$OUT/$name.log" | tail -40 >> "$OUT/session.log"
  log "$name: exit ${PIPESTATUS[0]}"
}
log "host: $(nvidia-smi -L 2>/dev/null | head -1); $(python3 -c 'import torch;print("torch", torch.__version__)')"
python3 -c 'import git' 2>/dev/null || log "GitPython missing (no .whl carried): the accept tests and the drop-in bench will fail"
phase eval_bench 200 python3 bench/eval_bench.py --evaluation-only --baseline 0 --out "$OUT/eval_bench.json"
phase dropin 60 python3 bench/dropin_bench.py --kernels add --out "$OUT/dropin.json"
phase gpu_tests 600 python3 -m pytest -m gpu -p no:cacheprovider -rA tests/gpu
log done
