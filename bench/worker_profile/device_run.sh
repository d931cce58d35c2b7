#!/usr/bin/env bash
# One device call (~3 min): the first-call probe, then eval_bench twice with the worker profile
# (marks only on a cold cache: the real run; then cProfile on the warm build cache), each summed up.
#   bash bench/worker_profile/device_run.sh     # results under $OUT
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/kevin-profile-out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/bench${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PROFILED="$PWD/bench/worker_profile:$PYTHONPATH"
{ nvidia-smi -L; git rev-parse --short HEAD 2>/dev/null; nproc; date -u; } > "$OUT/host.txt" 2>&1
timeout 90 python3 bench/worker_profile/first_calls.py --out "$OUT/first_calls.jsonl" > "$OUT/first_calls.log" 2>&1
rm -rf /tmp/wpm /tmp/wpp /tmp/wpb
KEVIN_WORKER_PROFILE=/tmp/wpm KEVIN_WORKER_PROFILE_MARKS_ONLY=1 PYTHONPATH="$PROFILED" timeout 150 \
  python3 bench/eval_bench.py --evaluation-only --baseline 0 --work /tmp/wpb --out "$OUT/bench_marks.json" \
  > "$OUT/bench_marks.log" 2>&1
python3 bench/worker_profile/report.py /tmp/wpm --top 0 > "$OUT/marks.txt" 2>&1
KEVIN_WORKER_PROFILE=/tmp/wpp PYTHONPATH="$PROFILED" timeout 120 \
  python3 bench/eval_bench.py --evaluation-only --baseline 0 --work /tmp/wpb --out "$OUT/bench_prof.json" \
  > "$OUT/bench_prof.log" 2>&1
python3 bench/worker_profile/report.py /tmp/wpp --top 70 > "$OUT/profile.txt" 2>&1
tail -3 "$OUT/bench_marks.log" "$OUT/bench_prof.log"; head -20 "$OUT/marks.txt"
