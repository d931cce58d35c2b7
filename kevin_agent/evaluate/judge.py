"""The judge process: the candidate's outputs against a reference the candidate cannot reach (issue 19).

``python -m kevin_agent.evaluate.judge``: started beside a GPU worker, before any candidate code
exists (a spare: torch imported, its own CUDA context). After the worker has ended, the parent
writes one JSON line on its stdin (the task's source, the settings' seed, the witness file); the
judge loads the reference itself, and for every call in the witness makes the inputs from that
call's seed, runs the reference (and, where gate 1 fails by tolerance only, its float64 run) and
compares with its own tolerances (``worker.correctness.check_outputs``). Its report
(``judgement.JudgeReport``) is one JSON line on its stdout, a pipe only the parent holds; what the
task's code prints goes to stderr. torch and the standard library only.
"""

from __future__ import annotations

import os
import sys


def _drop_working_folder() -> None:
    """Its working folder lies in the job folder, which candidate code may write: a module planted
    there must never be imported by a later lazy import (``python -m`` puts the folder first)."""
    here = os.path.realpath(os.getcwd())
    sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) != here]


_drop_working_folder()

import json  # noqa: E402 - after the path is cleaned
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Optional, TextIO  # noqa: E402

from kevin_agent.evaluate.judgement import CheckedCall, JudgeReport  # noqa: E402


def main() -> int:
    report_out: TextIO = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever the task's code prints goes to stderr, never into the report
    import torch

    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.init()
        torch.empty(1, device=device)  # the context now, while this judge is a spare
    import kevin_agent.evaluate.judge_wire  # what judging needs, imported before any candidate exists
    import kevin_agent.evaluate.worker.context  # noqa: F401

    warm_up(device)
    line = sys.stdin.readline()
    report = judge(line, device)
    report_out.write(report.to_json() + "\n")
    report_out.flush()
    return 0


def warm_up(device: Any) -> None:
    """One check of each kind on small tensors while this judge is a spare, so the kernels a job
    needs (random inputs, both gates, the constant check) are loaded before it starts."""
    from kevin_agent.evaluate.worker.warm import warm_checks

    warm_checks(device)


def judge(line: str, device: Any, worker_ended: Callable[[], str] = sys.stdin.readline) -> JudgeReport:
    """The report for one judge job (a JSON line: ``task_source``, ``seed``, ``witness``, and
    ``observe``: the job came with the worker's, so observe it through the channel first, then
    wait for ``worker_ended`` (the parent's next line) before reading the witness)."""
    try:
        job = json.loads(line)
        source, seed, witness = job["task_source"], job["seed"], Path(job["witness"])
        if not isinstance(source, str) or type(seed) is not int:
            raise TypeError("task_source and seed")
    except (ValueError, TypeError, KeyError) as exc:
        return JudgeReport(error=f"the judge's job is malformed ({type(exc).__name__}: {exc})")
    started = time.perf_counter()
    try:
        task, reference = _load_reference(source, seed, device)
    except Exception as exc:  # the task fails here though it ran in the worker
        return JudgeReport(error=f"the reference failed in the judge ({type(exc).__name__}: {str(exc)[:300]})")
    loaded = time.perf_counter()
    observation = _observe(task, reference, device) if job.get("observe") is True else None
    observed_s = time.perf_counter() - loaded
    if job.get("observe") is True:
        worker_ended()
    report = _check_witness(task, reference, witness, device, seed)
    report.observation = observation
    if observation is not None:
        report.seconds["observe"] = observed_s
    report.seconds["load"] = loaded - started
    return report


def _observe(task: Any, reference: Any, device: Any) -> Optional[Any]:
    """The worker's calls run on inputs made here and read from here (``observe.observer``);
    an Observation whose ``error`` says why when the channel is missing or breaks."""
    from kevin_agent.evaluate.observe.observer import Judged, observe
    from kevin_agent.evaluate.observe.report import Observation
    from kevin_agent.evaluate.observe.transport import transport_for
    from kevin_agent.evaluate.observe.wire import FOLDER_ENV, Channel, ChannelError
    from kevin_agent.evaluate.worker.correctness import CorrectnessHarness, Fp64Reference, check_outputs, trial_inputs
    from kevin_agent.evaluate.worker.exercise import VARIANTS

    channel = Channel.from_env()
    if channel is None:
        return Observation(error="the judge has no channel to the worker")
    try:
        folder = os.environ.get(FOLDER_ENV)
        transport = transport_for(device, Path(folder) if folder else None)
    except (ChannelError, OSError) as exc:
        return Observation(error=f"no shared memory with the worker ({exc})")
    harness = CorrectnessHarness(reference=reference, candidate=list, get_inputs=list, device=device,
                                 seed_all=_seed_all, synchronize=lambda: transport.synchronize(), poison=lambda: 0,
                                 reference64=Fp64Reference(reference))

    def inputs(seed: int) -> list[Any]:
        """Plain ``get_inputs()`` or one of the variants that exercise the computation
        (``worker.exercise``), chosen by the seed, which the worker never sees: a candidate that
        computes honestly only on inputs it recognises as varied is read on both kinds."""
        pick = seed % (2 * len(VARIANTS))  # half the sets plain, the rest one of the variants each
        variant = pick + 1 if pick < len(VARIANTS) else 0  # k: the k-th variant, as correctness trial k + 1
        made, _ = trial_inputs(task.get_inputs, reference, device, _seed_all, seed, seed - 1 - variant)
        return list(made)

    def check(args: list[Any], got: list[Any], where: str, select: Any) -> list[str]:
        return check_outputs(harness, args, got, where, select=select)

    try:
        return observe(channel, transport, Judged(reference, inputs, check))
    finally:
        channel.close()


def _seed_all(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(seed)


def _load_reference(source: str, seed: int, device: Any) -> tuple[Any, Any]:
    """As the worker loads it (``worker.context.build_reference``), so the weights are the same."""
    from kevin_agent.evaluate.worker.context import build_reference

    folder = Path(tempfile.mkdtemp(prefix="judge-"))
    task, reference, _ = build_reference(source, folder / "reference_task.py", "kevin_judge_task", _seed_all, seed,
                                         device)
    return task, reference


def _check_witness(task: Any, reference: Any, witness: Path, device: Any, base_seed: int) -> JudgeReport:
    import torch

    from kevin_agent.evaluate.judge_wire import BadWitness, SampledLeaf, read_witness
    from kevin_agent.evaluate.worker.correctness import (
        CorrectnessHarness,
        Fp64Reference,
        check_outputs,
        to_device,
        trial_inputs,
    )

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    harness = CorrectnessHarness(reference=reference, candidate=list, get_inputs=list, device=device,
                                 seed_all=_seed_all, synchronize=synchronize, poison=lambda: 0,
                                 reference64=Fp64Reference(reference))
    report = JudgeReport(seconds=dict.fromkeys(("read", "inputs", "compare"), 0.0))
    clock = time.perf_counter

    def spent(phase: str, since: float) -> float:
        now = clock()
        report.seconds[phase] += now - since
        return now

    try:
        mark = clock()
        for call in read_witness(witness):
            mark = spent("read", mark)
            if call.repeat:  # the previous call's outputs again: the same comparison, the same outcome
                if not report.checked or report.checked[-1].seed != call.seed:
                    raise BadWitness("a repeated call follows no call of its seed")
                report.checked.append(CheckedCall(call.seed, call.label, report.checked[-1].problem))
                continue
            inputs, _ = trial_inputs(task.get_inputs, reference, device, _seed_all, call.seed, base_seed)
            got = [leaf.values.to(device) if isinstance(leaf, SampledLeaf) else to_device(leaf, device)
                   for leaf in call.leaves]
            synchronize()
            mark = spent("inputs", mark)
            problems = check_outputs(harness, inputs, got, call.label, select=_sample_selector(call.leaves, device))
            report.checked.append(CheckedCall(call.seed, call.label, problems[0] if problems else None))
            mark = spent("compare", mark)
    except (OSError, BadWitness) as exc:
        report.error = f"the witness of your outputs is unreadable: {exc}"
    except Exception as exc:  # the reference failing on an input set it ran on in the worker
        report.error = f"the judge's reference run failed ({type(exc).__name__}: {str(exc)[:300]})"
    return report


def _sample_selector(leaves: list[Any], device: Any) -> Any:
    """For a call with sampled leaves: ``select(index, reference_leaf)``, the reference leaf at the
    positions the witness's sample seed draws (drawn once per leaf, for the reference and its
    float64 run alike; a leaf of another shape is left whole, so the comparison reports the
    shapes); None when every leaf was written whole."""
    import math

    import torch

    from kevin_agent.evaluate.judge_wire import SampledLeaf, sample_positions

    sampled = {i: leaf for i, leaf in enumerate(leaves) if isinstance(leaf, SampledLeaf)}
    if not sampled:
        return None
    positions = {i: sample_positions(leaf.seed, math.prod(leaf.shape), leaf.values.numel(), device)
                 for i, leaf in sampled.items()}

    def select(index: int, full: Any) -> Any:
        leaf = sampled.get(index)
        if leaf is None or not isinstance(full, torch.Tensor) or list(full.shape) != leaf.shape:
            return full
        return full.reshape(-1)[positions[index]]

    return select


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # the report is written: skip the interpreter's and the CUDA context's teardown
