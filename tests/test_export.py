"""RL export: Kevin's score, discounted returns (sum and max), GRPO advantages, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from loop_fixtures import stored_run

from kevin_agent.export import rl_samples


def by_id(samples):
    return {s.candidate_id: s for s in samples}


def test_scores_sum_returns_and_advantages_match_hand_computed_values(tmp_path):
    store = stored_run(tmp_path)
    record = store.load_run("run-1")
    samples = by_id(rl_samples(record, store.load_messages("run-1"), gamma=0.4, aggregate="sum"))
    scores = {cid: s.score for cid, s in samples.items()}
    # t1.1 ("hack", 40x, flagged as faster than the speed of light) is not trusted: it earns nothing
    assert scores == pytest.approx({"t0.0": 0.0, "t0.1": 1.1, "t0.2": 2.3,
                                    "t1.0": 0.0, "t1.1": 0.0, "t1.2": 0.0})
    returns = {cid: s.discounted_return for cid, s in samples.items()}
    # R_2 = r_2; R_1 = r_1 + 0.4 r_2; R_0 = r_0 + 0.4 r_1 + 0.16 r_2
    assert returns == pytest.approx({"t0.2": 2.3, "t0.1": 1.1 + 0.92, "t0.0": 0.44 + 0.368,
                                     "t1.2": 0.0, "t1.1": 0.0, "t1.0": 0.0})
    # mean 0.854667, population std 0.969582
    advantages = {cid: s.advantage for cid, s in samples.items()}
    assert advantages == pytest.approx({"t0.0": -0.048131, "t1.0": -0.88148, "t0.1": 1.201893,
                                        "t1.1": -0.88148, "t0.2": 1.490677, "t1.2": -0.88148},
                                       abs=1e-5)
    assert not samples["t1.1"].correct and samples["t1.1"].speedup == 0.0
    assert samples["t1.1"].flags == ["beyond_speed_of_light"]
    assert samples["t0.2"].flags == [] and samples["t0.2"].correct
    assert samples["t0.1"].prompt == [{"role": "user", "content": "prompt for t0.1"}]
    assert samples["t0.1"].response == "answer t0.1" and samples["t0.1"].reasoning == "thinking"


def test_max_aggregation(tmp_path):
    store = stored_run(tmp_path)
    samples = by_id(rl_samples(store.load_run("run-1"), {}, gamma=0.8, aggregate="max"))
    # R_t = max_{i>=t} 0.8^(i-t) r_i
    assert {c: s.discounted_return for c, s in samples.items()} == pytest.approx(
        {"t0.2": 2.3, "t0.1": max(1.1, 0.8 * 2.3), "t0.0": 0.64 * 2.3,
         "t1.2": 0.0, "t1.1": 0.0, "t1.0": 0.0})


def test_returns_follow_forked_histories(tmp_path):
    # beam-style: after turn 0 both trajectories continue t0.0's history
    parents = {"t1.1": "t0.0"}
    store = stored_run(tmp_path, {0: ["slow", "slow", "slow"], 1: ["quick", "wrong", "wrong"]},
                       parents)
    samples = by_id(rl_samples(store.load_run("run-1"), {}, gamma=0.5))
    assert samples["t1.0"].discounted_return == pytest.approx(2.3)  # no continuation
    assert samples["t0.0"].discounted_return == pytest.approx(1.1 + 0.5 * 1.1 + 0.25 * 1.1)
    assert samples["t1.1"].discounted_return == pytest.approx(0.0)  # its future: t1.2 (wrong)


def kevin(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kevin_agent", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_export_cli_writes_jsonl_and_rejects_bad_input(tmp_path):
    stored_run(tmp_path)
    out = tmp_path / "samples.jsonl"
    done = kevin(tmp_path, "export", "latest", "--format", "rl", "-o", str(out))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 6 and lines[0]["candidate_id"] == "t0.0"
    assert lines[0]["discounted_return"] == pytest.approx(0.808)
    assert [line["flags"] for line in lines if line["flags"]] == [["beyond_speed_of_light"]]

    bad_gamma = kevin(tmp_path, "export", "latest", "--format", "rl", "--gamma", "1.5",
                      "-o", str(tmp_path / "never.jsonl"))
    assert bad_gamma.returncode == 2
    assert bad_gamma.stderr.strip().count("\n") == 0 and "--gamma" in bad_gamma.stderr
    assert not (tmp_path / "never.jsonl").exists()

    unknown = kevin(tmp_path, "export", "no-such-run", "--format", "rl")
    assert unknown.returncode == 2 and "kevin runs" in unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_export_to_a_folder_or_an_unwritable_place_is_one_line(tmp_path):
    stored_run(tmp_path)
    folder = tmp_path / "out"
    folder.mkdir()
    into_folder = kevin(tmp_path, "export", "latest", "--format", "rl", "-o", str(folder))
    assert into_folder.returncode == 2 and "it is a folder" in into_folder.stderr
    assert into_folder.stderr.strip().count("\n") == 0 and list(folder.iterdir()) == []
    refused = kevin(tmp_path, "export", "latest", "--format", "rl", "-o", "/proc/kevin-samples.jsonl")
    assert refused.returncode == 2 and "cannot write /proc/kevin-samples.jsonl" in refused.stderr
    assert "Traceback" not in refused.stderr and refused.stderr.strip().count("\n") == 0
