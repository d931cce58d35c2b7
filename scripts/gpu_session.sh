#!/usr/bin/env bash
# The whole GPU suite (tests/gpu) and the GPU benches in two parts, one device call each (<= 9 min):
#
#   bash scripts/gpu_session.sh 1    # provenance + guards tests, eval_bench, examples/record_verdicts.py
#   bash scripts/gpu_session.sh 2    # worker, lease, loop, sandbox, accept tests, dropin bench
#   bash scripts/gpu_session.sh 1 480   # a part with another time budget (seconds; default 530)
#
# How it splits, and why: the suite has two build caches, each filled once per pytest process by
# a parallel precompile (the torch header ~30 s plus every candidate). test_gpu_provenance.py
# builds its ~40 candidates into its own cache and then runs ~44 worker jobs; every other module
# shares conftest.py's session cache (the fixture kernels, the adversarial candidates and the loop
# test's turns). So each part is one pytest process over the modules of one cache, then the
# benches that fit the time left:
#   part 1: provenance (~40 builds + 44 jobs, ~5 min) + guards (~15 s); eval_bench (~90 s, its own
#           cache); record_verdicts (~60-90 s: a cold `kevin optimize` of the demo).
#   part 2: worker (13 jobs), lease (two evaluators), loop (4 turns, ~50 s with the shared cache),
#           sandbox (16 tests, ~3 min), accept (2 drop-in builds); dropin bench (~30 s).
# Every test has a per-test timeout (tests/gpu/conftest.py) and every phase a wall limit cut to the
# time left, so a hang costs its own limit, never the part; a phase with < 20 s left is skipped.
#
# Results, under $OUT (what the device tool returns: <= 8 files, no subfolders used):
#   DATE-GPU-gpu-session-N.json   summary written as the part goes (bench/gpu_summary.py): commit
#                                 and dirty flag, date, host, every test's nodeid/outcome/duration,
#                                 counts, the test running when it was cut, each bench's figures
#   DATE-GPU-gpu-session-N.log    this script's log with every phase's output
#   DATE-GPU-gpu-verdicts-N.jsonl every GPU-test verdict and build time (KEVIN_GPU_LOG)
#   verdicts.json                 part 1: the new examples/verdicts.json (record_verdicts.py)
# Copy the .json/.jsonl/.log files into bench/results/ (and verdicts.json into examples/), then
# regenerate bench/RESULTS.md: python bench/make_results.py. Details: docs/gpu.md.
#
# The accept tests and the drop-in bench need GitPython, absent on the device host: carry its
# wheels in .whl/ (pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl
# GitPython gitdb smmap; call with carry [".whl"]); they are installed into /tmp/site here.
set -uo pipefail
cd "$(dirname "$0")/.."
PART="${1:-}"
BUDGET="${2:-530}"
case "$PART" in
  1) TESTS=(tests/gpu/test_gpu_provenance.py tests/gpu/test_gpu_guards.py) ;;
  2) TESTS=(tests/gpu/test_gpu_worker.py tests/gpu/test_gpu_lease.py tests/gpu/test_loop_gpu.py
            tests/gpu/test_sandbox_gpu.py tests/gpu/test_accept_gpu.py) ;;
  *) echo "usage: bash scripts/gpu_session.sh 1|2 [SECONDS]" >&2; exit 2 ;;
esac
OUT="${OUT:-/tmp/kevin-gpu-out}"; mkdir -p "$OUT"
START=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - START) )); }

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD:$PWD/bench${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
GPU=$(python3 -c 'import torch; print(torch.cuda.get_device_name(0).split()[-1].lower())' 2>/dev/null || echo nogpu)
NAME="$(date -u +%F)-$GPU-gpu-session-$PART"
SUMMARY="$OUT/$NAME.json" LOG="$OUT/$NAME.log"
export KEVIN_GPU_SUMMARY="$SUMMARY" KEVIN_GPU_LOG="$OUT/$(date -u +%F)-$GPU-gpu-verdicts-$PART.jsonl"
python3 bench/gpu_summary.py init "$SUMMARY" "$PART"

log() { echo "== $(date -u +%T) [$(left) s left] $*" | tee -a "$LOG"; }
phase() {  # phase NAME CAP_SECONDS [RESULT_JSON] -- COMMAND...: run, log, record in the summary
  local name=$1 limit=$2 result="" avail started rc; shift 2
  if [ "$1" != "--" ]; then result=$1; shift; fi
  shift
  avail=$(left); (( avail < limit )) && limit=$avail
  if (( limit < 20 )); then log "$name: skipped (time)"; python3 bench/gpu_summary.py bench "$SUMMARY" "$name" 124 0; return; fi
  log "$name (limit ${limit}s): $*"
  started=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >>"$LOG" 2>&1; rc=$?
  log "$name: exit $rc after $(( $(date +%s) - started )) s"
  python3 bench/gpu_summary.py bench "$SUMMARY" "$name" "$rc" "$(( $(date +%s) - started ))" ${result:+"$result"}
}

log "part $PART on $(nvidia-smi -L 2>/dev/null | head -1); commit $(git rev-parse --short HEAD 2>/dev/null || echo none)"
python3 -c 'import git' 2>/dev/null || log "GitPython missing (no .whl carried): the accept tests and the drop-in bench will fail"
# the tests first (the suite is what must pass), then the benches in the time left
phase gpu_tests $(( BUDGET - 60 )) -- python3 -m pytest -m gpu -p no:cacheprovider -p gpu_summary -rfE -q "${TESTS[@]}"
if [ "$PART" = 1 ]; then
  phase eval_bench 150 "$OUT/eval_bench.json" -- python3 bench/eval_bench.py --evaluation-only --baseline 0 --out "$OUT/eval_bench.json"
  rm -f "$OUT/eval_bench.json"  # its figures are in the summary now
  phase record_verdicts 150 -- python3 examples/record_verdicts.py -o "$OUT/verdicts.json"
  [ -f "$OUT/verdicts.json" ] && python3 bench/gpu_summary.py file "$SUMMARY" verdicts "verdicts.json"
else
  phase dropin 90 "$OUT/dropin.json" -- python3 bench/dropin_bench.py --kernels add --out "$OUT/dropin.json"
  rm -f "$OUT/dropin.json"
fi
python3 bench/gpu_summary.py finish "$SUMMARY"
log "done: $(python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s['counts'])" "$SUMMARY")"
