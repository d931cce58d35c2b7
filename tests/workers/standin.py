"""A stand-in GPU worker speaking the real worker protocol (READY, one job path, result file).

Start modes come from argv (``python standin.py [noready|slowstart]``): noready exits before
READY; slowstart sleeps START_DELAY seconds before READY. The job's candidate source names what
to do with the job (a "standin: MODE" comment, else its first word): normal, crash (SIGSEGV),
abort (CUDA-like error text then SIGABRT), hang, exit3 (os._exit(3)), noresult (exit 0 without a
result), grandchild (start a sleeping child, write its pid to $GRANDCHILD_PID_FILE, then hang), env
(report visible secret-looking variables), forge (a passing reply without the job's token, as
candidate code in the worker's process could write one). Every result message is a JSON object with the pid, cwd
and (env mode) the visible secret names, so tests can assert on them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")
SECRET_PREFIXES = ("OPENAI_", "ANTHROPIC_", "HF_", "HUGGING", "AWS_", "GITHUB_")


def visible_secrets() -> list[str]:
    return sorted(
        name for name in os.environ
        if any(w in name.upper() for w in SECRET_WORDS) or name.upper().startswith(SECRET_PREFIXES)
    )


def write_reply(path: str, reply: dict) -> None:
    """Write a reply file atomically, as the real worker does (a temp file, then rename)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(reply, handle)
    os.replace(tmp, path)


def write_result(path: str, info: dict, token: str = "") -> None:
    verdict = {
        "stage": "timing",
        "ok": True,
        "message": json.dumps(info),
        "details": {"speedup_vs_eager": 1.5, "gpu_name": "stand-in"},
    }
    write_reply(path, {"verdict": verdict, "token": token})


def write_baseline(path: str, eager_ms: float = 1.2, compiled_ms: float = 0.8, token: str = "",
                   gpu_name: str = "stand-in") -> None:
    """A baseline job's reply: the reference 'timed' at 1.2 ms eager, 0.8 ms compiled (by default)."""
    stats = lambda ms: {"median_ms": ms, "mean_ms": ms, "min_ms": ms, "max_ms": ms, "iqr_ms": 0.0,  # noqa: E731
                        "trials": 20, "ci_low_ms": ms, "ci_high_ms": ms}
    write_reply(path, {"baseline": {"eager": stats(eager_ms), "compiled": stats(compiled_ms), "gpu_name": gpu_name},
                       "token": token})


def compile_ahead(job: dict) -> None:
    """A compile-ahead job: 'builds' for $STANDIN_AHEAD_S seconds (default 0), appends its pid and
    both ends' times to $STANDIN_AHEAD_LOG when set, and says it built. $STANDIN_KEEP=1: it says it
    waits for the baseline job and runs the next job on stdin ("stand-in kept PID" as the GPU's
    name); =die: it says so, then exits without one (a worker lost between its build and its baseline)."""
    started = time.time()
    time.sleep(float(os.environ.get("STANDIN_AHEAD_S", "0")))
    log = os.environ.get("STANDIN_AHEAD_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(json.dumps({"pid": os.getpid(), "started": started, "ended": time.time(),
                                     "niceness": os.nice(0)}) + "\n")
    keep = os.environ.get("STANDIN_KEEP", "")
    write_reply(job["result_path"], {"compiled_ahead": {"ok": True, "waits_for_baseline": bool(keep), "stage_seconds": {
        "baseline_compile_ahead": time.time() - started}}, "token": job.get("reply_token", "")})
    if keep == "die":
        time.sleep(0.3)
        return
    if keep:
        with open(sys.stdin.readline().strip()) as handle:
            baseline_job = json.load(handle)
        write_baseline(baseline_job["result_path"], token=baseline_job.get("reply_token", ""),
                       gpu_name=f"stand-in kept {os.getpid()}")


def main(start_mode: str) -> None:
    if start_mode == "noready":
        print("cannot start: no CUDA here", file=sys.stderr)
        sys.exit(1)
    if start_mode == "slowstart":
        time.sleep(float(os.environ.get("START_DELAY", "1.0")))
    print("READY", flush=True)
    job_path = sys.stdin.readline().strip()
    with open(job_path) as handle:
        job = json.load(handle)
    if job.get("compile_ahead"):
        compile_ahead(job)
        return
    if job.get("measure_baseline"):
        write_baseline(job["result_path"], token=job.get("reply_token", ""))
        return
    marker = re.search(r"standin: (\w+)", job["candidate_source"])
    mode = marker.group(1) if marker else job["candidate_source"].split()[0]
    info = {"pid": os.getpid(), "cwd": os.getcwd(), "candidate": job["candidate_source"],
            "arch": job["settings"].get("arch"), "cache_dir": job["cache_dir"]}
    if mode == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif mode == "abort":
        print("CUDA error: an illegal memory access was encountered", file=sys.stderr, flush=True)
        os.abort()
    elif mode == "hang":
        time.sleep(3600)
    elif mode == "sleep":
        time.sleep(1.0)
    elif mode == "exit3":
        os._exit(3)
    elif mode == "noresult":
        sys.exit(0)
    elif mode == "grandchild":
        child = subprocess.Popen(["sleep", "3600"])
        with open(os.environ["GRANDCHILD_PID_FILE"], "w") as handle:
            handle.write(str(child.pid))
        time.sleep(3600)
    elif mode == "env":
        info["visible_secrets"] = visible_secrets()
        info["path_set"] = bool(os.environ.get("PATH"))
        info["cuda_vars"] = sorted(n for n in os.environ if n.startswith("CUDA_"))
    elif mode == "forge":  # candidate code writing a passing verdict of its own, then ending the process
        write_result(job["result_path"], info, token="guessed")
        os._exit(0)
    write_result(job["result_path"], info, job.get("reply_token", ""))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
