"""A stand-in GPU worker that writes a witness for the judge (tests/test_judge_process.py).

Speaks the worker protocol (READY, one job path, a reply with the job's token) on the CPU and
always claims a passing TIMING verdict, as candidate code that tampered with the in-process
checks would. What it writes into the witness comes from the job's candidate source (its first
word): honest (the reference's outputs for the trial seeds and one timed seed), wrong (those plus
0.5), partial (only the first trial), none (no witness), link (the witness replaced by a link to
a file outside the job folder), lie (a header that claims more bytes than the file holds); and
with every call kept as a sample (a writer whose whole-call limit is 256 bytes: 32 of the 128
elements), sampled (honest), sampled-wrong (every element off by 0.5), sampled-slab (the
reference's outputs but for one run of 16 elements in a row, off by 0.5).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from kevin_agent.evaluate.judge_wire import MAGIC, WitnessWriter
from kevin_agent.evaluate.judgement import trial_seed
from kevin_agent.evaluate.worker.context import build_reference
from kevin_agent.evaluate.worker.correctness import flatten_outputs, trial_inputs
from kevin_agent.evaluate.worker.guards import snapshot

TIMED_SEED = 987654321


def reference_outputs(task: object, reference: object, seed: int, base_seed: int) -> list:
    inputs, _ = trial_inputs(task.get_inputs, reference, "cpu", torch.manual_seed, seed, base_seed)  # type: ignore[attr-defined,arg-type]
    with torch.no_grad():
        return flatten_outputs(reference(*snapshot(inputs)))  # type: ignore[operator]


def main() -> None:
    print("READY", flush=True)
    job = json.loads(Path(sys.stdin.readline().strip()).read_text())
    mode = job["candidate_source"].split()[0]
    seed, trials = job["settings"]["seed"], max(1, job["settings"]["correctness_trials"])
    task, reference, _ = build_reference(job["task_source"], Path(job["scratch_dir"]) / "task.py", "standin_task",
                                         torch.manual_seed, seed, "cpu")
    witness_path = Path(job["witness_path"])
    if mode == "link":
        witness_path.symlink_to(os.environ.get("OUTSIDE_FILE", "/etc/hostname"))
    elif mode == "lie":
        header = json.dumps({"seed": trial_seed(seed, 0), "label": "lie",
                             "leaves": [{"dtype": "float32", "shape": [1 << 20, 1 << 10]}]}).encode()
        witness_path.mkdir()
        (witness_path / "call-000.bin").write_bytes(MAGIC + len(header).to_bytes(4, "big") + header + b"\0" * 64)
    elif mode != "none":
        sampled = mode.startswith("sampled")
        writer = WitnessWriter(witness_path, full_call_bytes=256, sample_elements=32) if sampled \
            else WitnessWriter(witness_path)
        shift = 0.5 if mode in ("wrong", "sampled-wrong") else 0.0
        seeds = [trial_seed(seed, t) for t in range(1 if mode == "partial" else trials)] + [TIMED_SEED]
        for s in seeds:
            for run in ("first", "second"):
                outputs = [o + shift for o in reference_outputs(task, reference, s, seed)]
                if mode == "sampled-slab":
                    outputs[0].view(-1)[40:56] += 0.5
                writer.record(s, f"{run} run, seed {s}", outputs)
    verdict = {"stage": "timing", "ok": True, "message": "Your answer was correct, with a speedup of 2.00x",
               "details": {"speedup_vs_eager": 2.0, "gpu_name": "stand-in"}}
    tmp = job["result_path"] + ".tmp"
    Path(tmp).write_text(json.dumps({"verdict": verdict, "token": job["reply_token"]}))
    os.replace(tmp, job["result_path"])


if __name__ == "__main__":
    main()
