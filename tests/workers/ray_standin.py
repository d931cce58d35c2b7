"""A stand-in GPU worker for the Ray tests: the real worker protocol (READY, one job path on stdin,
a reply file), and like the real worker it exits as soon as its parent closes stdin (the node's
actor died). It reports where it ran: the node's name, its build cache and the entries in it.

The candidate's source picks the mode with a "standin: MODE [SECONDS]" comment: normal, sleep S
(a long GPU stage), hang, crash (SIGSEGV), killactor (SIGKILL to its parent, the node's GPU actor).
With $KEVIN_TEST_PID_DIR set, it writes "<node>-<pid>" there when it takes a job, so tests can see
which node runs what.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin import write_baseline, write_result


def exit_when_orphaned() -> None:
    sys.stdin.buffer.read()
    os._exit(5)


def main() -> None:
    print("READY", flush=True)
    job_path = sys.stdin.readline().strip()
    threading.Thread(target=exit_when_orphaned, daemon=True).start()
    with open(job_path) as handle:
        job = json.load(handle)
    if job.get("measure_baseline"):
        write_baseline(job["result_path"])
        return
    node = os.environ.get("KEVIN_RAY_NODE_NAME", "?")
    folder = os.environ.get("KEVIN_TEST_PID_DIR")
    if folder:
        open(os.path.join(folder, f"{node}-{os.getpid()}"), "w").close()
    marker = re.search(r"standin: (\w+)(?: ([\d.]+))?", job["candidate_source"])
    mode, seconds = (marker.group(1), float(marker.group(2) or 0)) if marker else ("normal", 0.0)
    ext = os.path.join(job["cache_dir"], "ext")
    info = {"pid": os.getpid(), "node": node, "cache_dir": job["cache_dir"], "arch": job["settings"].get("arch"),
            "entries": sorted(os.listdir(ext)) if os.path.isdir(ext) else [],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if mode == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif mode == "killactor":  # takes its Ray worker (the GPU actor) down with it
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(3600)
    elif mode == "hang":
        time.sleep(3600)
    elif mode == "sleep":
        time.sleep(seconds)
    write_result(job["result_path"], info)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # as the real worker: the stdin watcher thread must not hold up the exit
