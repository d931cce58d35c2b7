"""A stand-in GPU worker for the Ray tests: the real worker protocol (READY, one job path on stdin,
a reply file), and like the real worker it exits as soon as its parent closes stdin (the node's
actor died). It reports where it ran: the node's name, its build cache and the entries in it.

The candidate's source picks the mode with a "standin: MODE [SECONDS]" comment: normal, sleep S
(a long GPU stage), hang, crash (SIGSEGV), killactor (SIGKILL to its parent, the node's GPU actor).
A task with a "standin-baseline-ms: MS" comment gets a baseline of MS ms (a long run limit).
When it takes a job it writes its node's name into ``STARTED_MARKER`` in its working folder (the
job's own, under the node's scratch): a worker's environment is allow-listed and may be in a PID
namespace, so tests find the host PID of a stand-in running a job by that file
(``ray_cluster.LocalCluster.running_standins``), not by anything the stand-in could report.
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

STARTED_MARKER = "ray-standin-started"  # written into the working folder when a job is taken


def exit_when_orphaned() -> None:
    sys.stdin.buffer.read()
    os._exit(5)


def main() -> None:
    print("READY", flush=True)
    job_path = sys.stdin.readline().strip()
    threading.Thread(target=exit_when_orphaned, daemon=True).start()
    with open(job_path) as handle:
        job = json.load(handle)
    if job.get("measure_baseline"):  # a "standin-baseline-ms: MS" comment in the task sets its time
        slow = re.search(r"standin-baseline-ms: ([\d.]+)", job["task_source"])
        ms = float(slow.group(1)) if slow else 1.2
        write_baseline(job["result_path"], ms, ms, job.get("reply_token", ""))
        return
    node = os.environ.get("KEVIN_RAY_NODE_NAME", "?")
    with open(STARTED_MARKER, "w") as marker_file:  # in the working folder the pool gave this job
        marker_file.write(node)
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
    write_result(job["result_path"], info, job.get("reply_token", ""))


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # as the real worker: the stdin watcher thread must not hold up the exit
