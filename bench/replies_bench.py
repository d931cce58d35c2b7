"""``kevin bench --replies`` over a corpus, timed, then a few of its answers judged alone with
``kevin eval`` in the same run: the wall and whether the verdicts agree (issue 42).

The corpus is ``bench/kernelbench/replies.jsonl``: 60 KernelBench tasks (levels 1-3, the problem
files as first published, MIT) and an answer written for each (``bench/kernelbench/answers``). The
bench runs in a fresh git repository with a fresh build cache; then ``--alone N`` answers (spread
over the levels) are judged by ``kevin eval --no-daemon`` on the same cache, and their verdicts'
facts (stage, outcome, correctness, trust, trials) compared with the batch's. Needs a GPU.

    python bench/replies_bench.py --out results.json [--policy partial] [--alone 4] [--limit 480]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kevin_agent.data import Verdict  # noqa: E402

CORPUS = ROOT / "bench" / "kernelbench" / "replies.jsonl"


def facts(verdict: Verdict) -> list[Any]:
    """What judging the same answer must agree on, whoever ran it (speedups are measurements)."""
    return [verdict.stage.value, verdict.ok, verdict.correct, verdict.trusted,
            verdict.details.correctness.trials_passed, verdict.details.correctness.trials_total]


def kevin(cwd: Path, env: dict[str, str], limit: float, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "kevin_agent", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=limit)
    except subprocess.TimeoutExpired as err:
        done = subprocess.CompletedProcess(err.cmd, 124, str(err.stdout or ""), str(err.stderr or ""))
    return done, time.monotonic() - started


def spread(names: list[str], count: int) -> list[str]:
    """``count`` names spread over the list (every level gets some when the list is sorted by level)."""
    if count >= len(names):
        return names
    step = len(names) / count
    return [names[int(i * step)] for i in range(count)]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="write the results as JSON here")
    parser.add_argument("--replies", type=Path, default=CORPUS, help="the corpus (default: the 60 KernelBench answers)")
    parser.add_argument("--policy", default="partial", help="provenance policy (default partial: KernelBench's rule)")
    parser.add_argument("--alone", type=int, default=4, help="answers judged alone afterwards (default 4)")
    parser.add_argument("--limit", type=float, default=480.0, help="seconds the bench may take (default 480)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="kevin-replies-bench-"))
    repo, cache = work / "repo", work / "cache"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVIN_", "OPENAI_"))}
    env.update(PYTHONPATH=str(ROOT), KEVIN_BUILD_CACHE=str(cache), KEVIN_EVAL_DAEMON_IDLE_S="0")
    replies = args.replies.resolve()
    corpus = str(replies.relative_to(ROOT)) if replies.is_relative_to(ROOT) else str(replies)
    lines = [json.loads(line) for line in replies.read_text().splitlines() if line.strip()]
    result: dict[str, Any] = {"corpus": corpus, "answers": len(lines), "policy": args.policy, "cpus": os.cpu_count()}
    try:
        from compile_bench import run_meta

        result["meta"] = {**run_meta(), "command": "python bench/replies_bench.py " + " ".join(sys.argv[1:])}
    except Exception as err:  # the figures matter more than the record of where they ran
        result["meta_error"] = repr(err)

    def save() -> None:
        args.out.write_text(json.dumps(result, indent=2, default=str))

    done, wall = kevin(repo, env, args.limit, "bench", "--replies", str(replies), "--policy", args.policy,
                       "--out", str(work / "bench-out"), "--json")
    result["bench"] = {"wall_s": round(wall, 2), "exit": done.returncode, "stderr_tail": done.stderr[-4000:]}
    save()
    print(f"kevin bench --replies: exit {done.returncode} after {wall:.1f} s", file=sys.stderr, flush=True)
    if done.returncode != 0:
        return 1
    summary = json.loads(done.stdout)
    result["bench"]["summary"] = {k: v for k, v in summary.items() if k != "tasks"}
    from kevin_agent.store import RunStore

    batch: dict[str, Verdict] = {}
    tasks: dict[str, dict[str, Any]] = {}
    with RunStore.for_path(repo) as store:
        for task in summary["tasks"]:
            if not task.get("run_id"):
                continue
            candidates = store.load_run(task["run_id"]).candidates
            if candidates and candidates[0][1] is not None:
                batch[task["name"]] = candidates[0][1]
                tasks[task["name"]] = task
    result["batch_verdicts"] = {name: facts(v) + [v.details.build.seconds] for name, v in batch.items()}
    save()
    by_name = {f"{Path(line['task']).parent.name}/{Path(line['task']).stem}": line for line in lines}
    alone: dict[str, Any] = {}
    for name in spread(sorted(batch, key=lambda n: (n.split("/")[0], int(n.split("/")[1].split("_")[0]))),
                       args.alone):
        line = by_name[name]
        done, wall = kevin(repo, env, 300.0, "eval", str(replies.parent / line["task"]),
                           str(replies.parent / line["candidate"]), "--policy", args.policy, "--json", "--no-daemon")
        try:
            verdict = Verdict.from_dict(json.loads(done.stdout))
            alone[name] = {"wall_s": round(wall, 2), "facts": facts(verdict), "batch_facts": facts(batch[name]),
                           "agree": facts(verdict) == facts(batch[name])}
        except ValueError:
            alone[name] = {"wall_s": round(wall, 2), "exit": done.returncode, "stderr_tail": done.stderr[-1500:]}
        result["alone"] = alone
        save()
        print(f"kevin eval alone {name}: {alone[name].get('agree')}", file=sys.stderr, flush=True)
    result["all_agree"] = bool(alone) and all(row.get("agree") for row in alone.values())
    save()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "bench"))
    sys.exit(main())
