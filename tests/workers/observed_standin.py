"""A stand-in GPU worker that serves the judge's observation on the CPU (tests/test_observe.py).

Speaks the worker protocol (READY, one job path, a reply with the job's token), writes an honest
witness (the reference's outputs for every trial seed and one timed seed) and always claims a
passing TIMING verdict, as candidate code that tampered with every in-process check would. Then
it serves the judge (``observe.served.serve``, the worker's own code) with a "candidate" chosen by
the job's candidate source (its first word): honest (the reference), wrong (every output off by
0.5), sometimes (off by 0.5 on every third call only), shape (the output transposed), raises
(an error on an observed call), slow-claim (honest, 3 ms per call, but claiming 0.001 ms), silent
(never serves: closes the channel), precomputed (answers every call with the outputs of the first
input set it saw, as a candidate that memoizes by pointer would), static (honest, but every call
writes into and returns one static buffer, as a CUDA-graph replay does).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from kevin_agent.data import Stage, Verdict, VerdictDetails
from kevin_agent.evaluate.judge_wire import WitnessWriter
from kevin_agent.evaluate.judgement import trial_seed
from kevin_agent.evaluate.observe.served import serve
from kevin_agent.evaluate.observe.transport import FileTransport
from kevin_agent.evaluate.observe.wire import FOLDER_ENV, Channel
from kevin_agent.evaluate.worker.context import build_reference
from kevin_agent.evaluate.worker.correctness import flatten_outputs, trial_inputs
from kevin_agent.evaluate.worker.guards import snapshot
from kevin_agent.verdict_records import TimingStats

TIMED_SEED = 987654321


def _stats(ms: float) -> TimingStats:
    return TimingStats(ms, ms, ms, ms, 0.0, 10)


def _write_witness(job: dict[str, Any], task: Any, reference: Any) -> None:
    seed, trials = job["settings"]["seed"], max(1, job["settings"]["correctness_trials"])
    writer = WitnessWriter(Path(job["witness_path"]))
    for s in [trial_seed(seed, t) for t in range(trials)] + [TIMED_SEED]:
        inputs, _ = trial_inputs(task.get_inputs, reference, "cpu", torch.manual_seed, s, seed)
        with torch.no_grad():
            outputs = flatten_outputs(reference(*snapshot(inputs)))
        for run in ("first", "second"):
            writer.record(s, f"{run} run, seed {s}", outputs)


def candidate_for(mode: str, reference: Any) -> Any:
    calls = {"n": 0}
    first: list[Any] = []

    def candidate(*args: Any) -> Any:
        calls["n"] += 1
        out = reference(*args)
        if mode == "wrong" or (mode == "sometimes" and calls["n"] % 3 == 0):
            return out + 0.5
        if mode == "shape":
            return out.t().contiguous()
        if mode == "raises":
            raise RuntimeError("an observed call failed")
        if mode == "slow-claim":
            time.sleep(0.003)
        if mode == "precomputed":
            first.append(first[0] if first else out.clone())
            return first[-1]
        if mode == "static":
            if not first:
                first.append(torch.empty_like(out))
            return first[0].copy_(out)
        return out

    return candidate


def main() -> None:
    print("READY", flush=True)
    job = json.loads(Path(sys.stdin.readline().strip()).read_text())
    mode = job["candidate_source"].split()[0]
    task, reference, _ = build_reference(job["task_source"], Path(job["scratch_dir"]) / "task.py", "standin_task",
                                         torch.manual_seed, job["settings"]["seed"], "cpu")
    _write_witness(job, task, reference)
    channel = Channel.from_env()
    if channel is not None:
        if mode != "silent":
            claim = 0.001 if mode == "slow-claim" else None
            why = serve(channel, FileTransport(Path(os.environ[FOLDER_ENV])), candidate_for(mode, reference), claim)
            print(f"served: {why or 'to the end'}", file=sys.stderr, flush=True)
        channel.close()
    details = VerdictDetails()
    details.timing.eager, details.timing.kernel = _stats(1.0), _stats(0.5)
    details.timing.speedup_vs_eager = 2.0
    verdict = Verdict(Stage.TIMING, True, "Your answer was correct, with a speedup of 2.00x", details)
    tmp = job["result_path"] + ".tmp"
    Path(tmp).write_text(json.dumps({"verdict": verdict.to_dict(), "token": job["reply_token"]}))
    os.replace(tmp, job["result_path"])


if __name__ == "__main__":
    main()
