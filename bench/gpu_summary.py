"""The JSON summary of one part of a GPU session (``scripts/gpu_session.sh``), written as the part
goes: a part killed at its limit still leaves every test and bench that finished.

    python bench/gpu_summary.py init FILE PART          # commit, dirty tree, date, host
    python bench/gpu_summary.py bench FILE NAME RC SECONDS [RESULT.json]   # one bench's figures
    python bench/gpu_summary.py file FILE NAME PATH     # name a raw file that came back beside it
    python bench/gpu_summary.py finish FILE             # the part ended (not killed)
    pytest -p gpu_summary ...                            # with KEVIN_GPU_SUMMARY=FILE: each test

Needs only the standard library (torch, when present, for the host's versions). Every write
replaces the file atomically (a temporary file renamed over it).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SUMMARY_ENV = "KEVIN_GPU_SUMMARY"
KIND = "gpu-session"
ROOT = Path(__file__).resolve().parent.parent


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def save(path: Path, summary: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    os.replace(tmp, path)


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def commit_info() -> dict[str, Any]:
    """HEAD's commit and whether the tree differs from it (tracked files; a copied tree without
    .git says so: commit None). ``KEVIN_SOURCE_COMMIT`` states the commit of a copied tree whose
    .git lags behind it (the device tool copies the working tree, not always its git metadata)."""
    commit = _git("rev-parse", "HEAD") or None
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no")) if commit else None
    stated = os.environ.get("KEVIN_SOURCE_COMMIT")
    if stated:
        return {"commit": stated, "dirty": None, "git_head": commit, "git_dirty": dirty,
                "commit_from": "KEVIN_SOURCE_COMMIT"}
    return {"commit": commit, "dirty": dirty}


def host_info() -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(), "cpus": os.cpu_count(),
                            "hostname": platform.node()}
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["gpu_count"] = torch.cuda.device_count()
    except Exception as err:  # a host without torch still gets a summary
        info["torch_error"] = f"{type(err).__name__}: {err}"
    smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True) if _which("nvidia-smi") else None
    if smi is not None and smi.returncode == 0:
        info["driver"] = smi.stdout.strip().splitlines()[0]
    info["TORCH_CUDA_ARCH_LIST"] = os.environ.get("TORCH_CUDA_ARCH_LIST")
    return info


def _which(name: str) -> bool:
    from shutil import which

    return which(name) is not None


def init(path: Path, part: str) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "kind": KIND, "part": part, "date": time.strftime("%Y-%m-%d"),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **commit_info(),
        "host": host_info(), "tests": [], "counts": {}, "running": None, "phases": {}, "files": {},
        "finished": None,
        # a part run with other tests or only some phases (scripts/gpu_session.sh's variables)
        "selection": {k: os.environ[k] for k in ("GPU_SESSION_TESTS", "GPU_SESSION_PHASES", "GPU_SESSION_TAG",
                                                             "GPU_SESSION_STOCK")
                      if os.environ.get(k)},
    }
    save(path, summary)
    return summary


def add_bench(path: Path, name: str, rc: int, seconds: float, result: Path | None) -> None:
    """One bench's exit status, wall time and its own JSON output (when it wrote one)."""
    summary = load(path)
    entry: dict[str, Any] = {"rc": rc, "seconds": round(seconds, 1), "result": None}
    if result is not None and result.is_file():
        try:
            entry["result"] = json.loads(result.read_text())
        except ValueError as err:
            entry["result_error"] = f"unreadable JSON: {err}"
    summary["phases"][name] = entry
    save(path, summary)


def add_file(path: Path, name: str, file: str) -> None:
    summary = load(path)
    summary["files"][name] = file
    save(path, summary)


def finish(path: Path) -> None:
    summary = load(path)
    summary["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    save(path, summary)


# -- the pytest plugin (``-p gpu_summary``; active only with $KEVIN_GPU_SUMMARY) ---------------------

_PHASES: dict[str, dict[str, Any]] = {}  # nodeid -> {"outcome", "duration", "message"}


def _summary_path() -> Path | None:
    raw = os.environ.get(SUMMARY_ENV)
    return Path(raw) if raw else None


def _outcome(report: Any, previous: str | None) -> str:
    """passed | failed (the test body) | error (set-up or teardown) | skipped."""
    if report.when == "call":
        return "skipped" if report.skipped else "passed" if report.passed else "failed"
    if report.failed:  # set-up, or a teardown after a passing body
        return "error" if previous in (None, "passed") else previous
    if report.skipped:
        return "skipped"
    return previous or "passed"


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    path = _summary_path()
    if path is not None and path.exists():
        summary = load(path)
        summary["running"] = {"nodeid": nodeid, "since": time.strftime("%H:%M:%SZ", time.gmtime())}
        save(path, summary)


def pytest_runtest_logreport(report: Any) -> None:
    entry = _PHASES.setdefault(report.nodeid, {"outcome": None, "duration": 0.0, "message": None})
    entry["duration"] += report.duration
    entry["outcome"] = _outcome(report, entry["outcome"])
    if report.failed and entry["message"] is None:
        entry["message"] = str(report.longrepr)[-2000:]


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    path = _summary_path()
    entry = _PHASES.get(nodeid)
    if path is None or not path.exists() or entry is None:
        return
    summary = load(path)
    summary["tests"].append({"nodeid": nodeid, "outcome": entry["outcome"], "duration_s": round(entry["duration"], 2),
                             **({"message": entry["message"]} if entry["message"] else {})})
    counts: dict[str, int] = {}
    for test in summary["tests"]:
        counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
    summary["counts"], summary["running"] = counts, None
    save(path, summary)


def pytest_collectreport(report: Any) -> None:
    """A module that fails to import is recorded as an error, not lost."""
    path = _summary_path()
    if report.failed and path is not None and path.exists():
        summary = load(path)
        summary.setdefault("collection_errors", []).append(
            {"nodeid": report.nodeid, "message": str(report.longrepr)[-2000:]})
        save(path, summary)


def main(argv: list[str]) -> int:
    usage = __doc__.split("\n\n")[1]
    if len(argv) < 2:
        print(usage, file=sys.stderr)
        return 2
    command, path = argv[0], Path(argv[1])
    if command == "init" and len(argv) == 3:
        init(path, argv[2])
    elif command == "bench" and len(argv) >= 5:
        add_bench(path, argv[2], int(argv[3]), float(argv[4]), Path(argv[5]) if len(argv) > 5 else None)
    elif command == "file" and len(argv) == 4:
        add_file(path, argv[2], argv[3])
    elif command == "finish":
        finish(path)
    else:
        print(usage, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
