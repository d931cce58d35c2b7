"""``kevin bench``: a KernelBench-format folder written here, the scripted backend, recorded
verdicts; the table's numbers, resume after a kill, --replies, compare, and bad input."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loop_fixtures import TASK_FILE, reply, write_replay, write_script

from kevin_agent.benchmark.metrics import TaskResult, summarize
from kevin_agent.benchmark.tasks import find_tasks
from kevin_agent.errors import UserInputError
from kevin_agent.store import RunStore

PLAN = {(0, 0): "broken", (1, 0): "quick", (0, 1): "slow", (1, 1): "hack"}


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for name in ("level1/1_Add.py", "level1/12_Add_again.py", "level1/2_Add_more.py", "level2/1_Add_fused.py"):
        (root / "kb" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(TASK_FILE, root / "kb" / name)
    (root / "kb" / "level1" / "__init__.py").write_text("")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def kevin(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVIN_", "OPENAI_"))}
    return subprocess.run([sys.executable, "-m", "kevin_agent", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def bench_args(repo: Path, delay_s: float = 0.0) -> list[str]:
    script = write_script(repo.parent / "script.json", PLAN)
    replay = write_replay(repo.parent / "replay.json", delay_s)
    return ["bench", "kb", "--backend", "scripted", "--script", str(script), "--evaluator", f"replay:{replay}",
            "-m", "2", "-n", "2"]


def overall(result: dict) -> dict:
    return next(row for row in result["summaries"] if row["level"] is None)


def test_tasks_are_found_by_level_in_numeric_order(repo):
    tasks = find_tasks([str(repo / "kb")])
    assert [t.name for t in tasks] == ["level1/1_Add", "level1/2_Add_more", "level1/12_Add_again",
                                       "level2/1_Add_fused"]
    assert [t.name for t in find_tasks([str(repo / "kb")], levels=[1], limit=2)] == ["level1/1_Add",
                                                                                     "level1/2_Add_more"]
    assert [t.name for t in find_tasks([str(repo / "kb")], pattern="*fused*")] == ["level2/1_Add_fused"]
    with pytest.raises(UserInputError, match="no tasks found"):
        find_tasks([str(repo / "kb")], levels=[3])


def test_metrics_on_fixed_numbers():
    results = [
        TaskResult("a", 1, status="done", candidates=4, compile_errors=1, correct=True, best_vs_eager=2.0,
                   best_vs_compile=1.5, trajectory_best=[2.0, 0.0]),
        TaskResult("b", 1, status="done", candidates=4, provenance_rejections=2, correct=True,
                   best_vs_eager=1.0, best_vs_compile=0.5, trajectory_best=[1.0, 1.0]),
        TaskResult("c", 1, status="done", candidates=2, correct=False, trajectory_best=[0.0, 0.0]),
    ]
    row = summarize(results, 1)
    assert row.correct == pytest.approx(2 / 3)
    # fast_p is strictly above p: 1.0x is not fast_1; 1.5x vs compile is not fast_1.5
    assert row.fast_vs_eager == pytest.approx({"0": 2 / 3, "1": 1 / 3, "1.5": 1 / 3})
    assert row.fast_vs_compile == pytest.approx({"0": 2 / 3, "1": 1 / 3, "1.5": 0.0})
    assert row.geomean_speedup == pytest.approx(2 ** 0.5)  # over the two correct tasks
    assert row.best_at_k == pytest.approx(1.0)  # (2 + 1 + 0) / 3
    assert row.avg_at_k == pytest.approx((1.0 + 1.0 + 0.0) / 3)
    assert row.compile_error_share == pytest.approx(0.1)
    assert row.provenance_rejection_share == pytest.approx(0.2)


def test_bench_table_json_and_report(repo):
    done = kevin(repo, *bench_args(repo), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [t["name"] for t in result["tasks"]][-1] == "level2/1_Add_fused"
    row = overall(result)
    # per task: broken (compile error), quick (2.0x eager, 1.33x compile), slow (0.8x), hack (untrusted)
    assert row["tasks"] == 4 and row["finished"] == 4 and row["correct"] == 1.0
    assert row["fast_vs_eager"] == {"0": 1.0, "1": 1.0, "1.5": 1.0}
    assert row["fast_vs_compile"] == {"0": 1.0, "1": 1.0, "1.5": 0.0}
    assert row["best_at_k"] == pytest.approx(2.0)  # the hack's 40x earns nothing
    assert row["avg_at_k"] == pytest.approx((0.8 + 2.0) / 2)
    assert row["compile_error_share"] == pytest.approx(0.25)
    assert row["untrusted_share"] == pytest.approx(0.25)
    assert [r["level"] for r in result["summaries"]] == [1, 2, None]
    assert "replayed verdicts" in result["replayed"]
    bench_dir = repo / ".kevin" / "bench" / result["bench_id"]
    page = (bench_dir / "report.html").read_text()
    assert page.count("<img") == 2 and "level2/1_Add_fused" in page and "replayed verdicts" in page
    table = kevin(repo, "bench", "compare", result["bench_id"], str(bench_dir / "result.json"))
    assert table.returncode == 0, table.stderr
    assert "best@k" in table.stdout and "+0.00x" in table.stdout


def test_bench_prints_the_table_with_levels(repo):
    done = kevin(repo, *bench_args(repo), "--levels", "2")
    assert done.returncode == 0, done.stderr
    assert "level 2" in done.stdout and "fast_1.5" in done.stdout and "level 1 " not in done.stdout
    assert "[1/1] level2/1_Add_fused: best 2.00x vs eager" in done.stderr


def test_resume_after_a_kill_loses_nothing(repo):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVIN_", "OPENAI_"))}
    proc = subprocess.Popen([sys.executable, "-m", "kevin_agent", *bench_args(repo, delay_s=0.3)], cwd=repo,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    bench_dir = repo / ".kevin" / "bench"
    try:
        for _ in range(6000):  # until the second task's run has been chosen (a guard, not a timing)
            manifests = list(bench_dir.glob("b*.json")) if bench_dir.is_dir() else []
            if manifests and sum(t["run_id"] is not None for t in json.loads(manifests[0].read_text())["tasks"]) >= 2:
                break
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    manifest = json.loads(next(bench_dir.glob("b*.json")).read_text())
    first_runs = [t["run_id"] for t in manifest["tasks"] if t["run_id"]]
    done = kevin(repo, "bench", "--resume", "latest", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [t["run_id"] for t in result["tasks"]][: len(first_runs)] == first_runs  # the same runs, resumed
    assert overall(result)["finished"] == 4 and overall(result)["best_at_k"] == pytest.approx(2.0)
    with RunStore.for_path(repo) as store:  # one run per task: nothing started twice
        assert sorted(r.run_id for r in store.list_runs()) == sorted(t["run_id"] for t in result["tasks"])


def test_replies_are_judged_without_a_model(repo, tmp_path):
    candidate = tmp_path / "answer.py"
    candidate.write_text((TASK_FILE.parent / "add_candidate.py").read_text() + "\n# kevin-test: quick\n")
    lines = [{"task": "kb/level1/1_Add.py", "reply": reply("wrong")},
             {"task": "kb/level1/1_Add.py", "candidate": str(candidate)},
             {"task": "kb/level2/1_Add_fused.py", "reply": reply("broken")}]
    replies = repo / "replies.jsonl"
    replies.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    replay = write_replay(repo.parent / "replay.json")
    done = kevin(repo, "bench", "--replies", str(replies), "--evaluator", f"replay:{replay}", "--json",
                 "--policy", "partial")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [(t["name"], t["candidates"], t["correct"]) for t in result["tasks"]] == [
        ("level1/1_Add", 2, True), ("level2/1_Add_fused", 1, False)]
    assert result["policy"] == "partial"
    assert overall(result)["correct"] == 0.5 and overall(result)["compile_error_share"] == pytest.approx(1 / 3)
    from kevin_agent.benchmark.report import settings_line

    assert result["replies"] == str(replies)  # the report says no model ran, and what was re-judged
    assert settings_line(result).startswith("partial policy; recorded replies from replies.jsonl re-judged, no model")


@pytest.mark.parametrize(("args", "expected"), [
    (["bench", "nowhere"], "nowhere: no such file or folder"),
    (["bench", "kb", "--levels", "one"], "--levels: 'one' is not a level number"),
    (["bench"], "name a KernelBench folder"),
    (["bench", "compare", "a"], "usage: kevin bench compare A B"),
    (["bench", "--resume", "zzz"], "no single benchmark matches 'zzz'"),
])
def test_bad_input_is_one_line_and_exit_2(repo, args, expected):
    done = kevin(repo, *args)
    assert done.returncode == 2
    assert expected in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_the_gpu_session_replies_file_names_real_tasks_and_answers():
    """bench/kernelbench_replies.jsonl (KernelBench's five examples, judged on the H200 by
    scripts/gpu_session.sh) reads cleanly: five tasks, one answer each."""
    from kevin_agent.benchmark.replies import by_task, read_replies

    grouped = by_task(read_replies(Path(__file__).parents[1] / "bench" / "kernelbench_replies.jsonl"))
    assert sorted(path.name for path in grouped) == [f"model_ex_{n}.py" for n in
                                                     ("add", "flash_attn", "fuse_gelu", "mnist2", "tiled_matmul")]
    assert all(len(texts) == 1 and "class ModelNew" in texts[0] for texts in grouped.values())


def no_model(path: Path) -> None:
    path.write_text("import torch\n\n\nclass NotModel(torch.nn.Module):\n    pass\n")


def test_a_benchmark_whose_every_task_is_skipped_says_so_and_exits_2(repo):
    for path in (repo / "kb").rglob("*.py"):
        if path.name != "__init__.py":
            no_model(path)
    done = kevin(repo, *bench_args(repo))
    assert done.returncode == 2, done.stderr
    assert "no task ran: all 4 tasks were skipped" in done.stderr
    assert done.stderr.count("1_Add.py has no class Model") == 1  # each skip told once
    assert "correct" not in done.stdout and not list((repo / ".kevin" / "bench").glob("*/result.json"))


def test_a_skipped_task_is_shown_apart_and_never_counted(repo):
    no_model(repo / "kb" / "level1" / "2_Add_more.py")
    done = kevin(repo, *bench_args(repo), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert overall(result)["tasks"] == 3 and overall(result)["correct"] == 1.0  # not 3 of 4
    assert [t["name"] for t in result["skipped"]] == ["level1/2_Add_more"]
    assert "has no class Model" in result["skipped"][0]["why"]
    assert "level1/2_Add_more" not in [t["name"] for t in result["tasks"]]
    assert done.stderr.count("2_Add_more.py has no class Model") == 1
    assert "1 of 4 tasks skipped, not counted" in done.stderr
    table = kevin(repo, *bench_args(repo), "--levels", "1")
    assert "1 skipped, not counted: level1/2_Add_more" in table.stdout


@pytest.mark.parametrize("content", [None, "{not json", '{"answers": []}'])
def test_a_bad_script_is_bad_input_before_any_task_starts(repo, content):
    script = repo.parent / "bad-script.json"
    if content is not None:
        script.write_text(content)
    replay = write_replay(repo.parent / "replay.json")
    done = kevin(repo, "bench", "kb", "--backend", "scripted", "--script", str(script),
                 "--evaluator", f"replay:{replay}")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "bad-script.json" in done.stderr
    assert not (repo / ".kevin" / "bench").exists()  # no plan: nothing started


def test_compare_reads_the_plan_of_a_benchmark_that_never_started(repo):
    for path in (repo / "kb" / "level2").glob("*.py"):
        no_model(path)
    never = kevin(repo, *bench_args(repo), "--levels", "2")
    assert never.returncode == 2, never.stderr
    (plan,) = (repo / ".kevin" / "bench").glob("b*.json")
    ran = kevin(repo, *bench_args(repo), "--levels", "1", "--json")
    assert ran.returncode == 0, ran.stderr
    ran_id = json.loads(ran.stdout)["bench_id"]
    for spec in (plan.stem, str(plan)):
        table = kevin(repo, "bench", "compare", spec, ran_id)
        assert table.returncode == 0, table.stderr
        assert f"A: {plan.stem}" in table.stdout and "never started: no task ran, nothing to compare" in table.stdout
        assert "correct" in table.stdout and "100%" in table.stdout  # B's figures, against nothing


def test_compare_labels_replayed_results_with_the_gpu_they_were_recorded_on(repo):
    from loop_fixtures import VERDICTS

    recorded = {f"# kevin-test: {m}": {**v, "details": {**v.get("details", {}),
                                                        "environment": {"gpu_name": "NVIDIA H200"}}}
                for m, v in VERDICTS.items()}
    replay = repo.parent / "h200.json"
    replay.write_text(json.dumps({"by_marker": recorded}))
    script = write_script(repo.parent / "script.json", PLAN)
    args = ["bench", "kb", "--levels", "2", "--backend", "scripted", "--script", str(script),
            "--evaluator", f"replay:{replay}", "-m", "2", "-n", "2", "--json"]
    first, second = (json.loads(kevin(repo, *args).stdout) for _ in range(2))
    assert first["measured"] == "replayed (recorded on NVIDIA H200)"
    table = kevin(repo, "bench", "compare", first["bench_id"], second["bench_id"])
    assert table.returncode == 0, table.stderr
    assert f"A: {first['bench_id']}, replayed (recorded on NVIDIA H200)" in table.stdout
    assert f"B: {second['bench_id']}, replayed (recorded on NVIDIA H200)" in table.stdout
