"""bench/RESULTS.md is generated from bench/results/*.json (issue 17): the committed page is what
the committed files give, and a GPU session's summary (bench/gpu_summary.py) renders with its
commit, host, counts, failures and bench figures."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench_module(name: str) -> ModuleType:
    """A script of bench/ (not a package) imported by path."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gpu_summary = _bench_module("gpu_summary")
make_results = _bench_module("make_results")


def test_results_page_is_what_the_committed_files_give() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "make_results.py"), "--check"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    page = (ROOT / "bench" / "RESULTS.md").read_text()
    assert "**16.2** (16 in 59.2 s wall)" in page  # the pipeline file's figure, with the file named
    assert "`2026-12-02-h200-eval_bench-pipeline.json`" in page
    assert page.count("*Transcribed, not measured output:*") == 7
    assert "| add | split | 11.52 s | - | 0.0009 s | 0.13 s | 131.2 s |" in page  # the 2-core file, stock timed


def _summary(tmp_path: Path) -> Path:
    (tmp_path / "results").mkdir()
    path = tmp_path / "results" / "2026-12-03-h200-gpu-session-2.json"
    gpu_summary.save(path, {
        "kind": "gpu-session", "part": "2", "date": "2026-12-03", "started": "2026-12-03T14:00:00Z",
        "commit": "0123456789abcdef0123", "dirty": True, "finished": None,
        "host": {"gpu": "NVIDIA H200", "driver": "580.1", "torch": "2.11.0+cu130", "cuda": "13.0", "python": "3.12.3",
                 "cpus": 16},
        "tests": [], "counts": {}, "running": None, "files": {},
        "phases": {"gpu_tests": {"rc": 1, "seconds": 412.0, "result": None}},
    })
    return path


class _Report:
    def __init__(self, nodeid: str, when: str, outcome: str, duration: float, longrepr: str = "") -> None:
        self.nodeid, self.when, self.duration, self.longrepr = nodeid, when, duration, longrepr
        self.passed, self.failed, self.skipped = outcome == "passed", outcome == "failed", outcome == "skipped"


def _play(nodeid: str, *phases: tuple[str, str, float, str]) -> None:
    gpu_summary.pytest_runtest_logstart(nodeid, None)
    for when, outcome, seconds, text in phases:
        gpu_summary.pytest_runtest_logreport(_Report(nodeid, when, outcome, seconds, text))
    gpu_summary.pytest_runtest_logfinish(nodeid, None)


def test_the_plugin_records_each_test_as_it_finishes_and_the_page_shows_it(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = _summary(tmp_path)
    monkeypatch.setenv(gpu_summary.SUMMARY_ENV, str(path))
    monkeypatch.setattr(gpu_summary, "_PHASES", {})
    ok = ("setup", "passed", 1.5, ""), ("call", "passed", 2.0, ""), ("teardown", "passed", 0.5, "")
    _play("tests/gpu/test_a.py::test_one", *ok)
    failed = "def test_two():\nE   AssertionError: load verdict\n"
    _play("tests/gpu/test_a.py::test_two", ("setup", "passed", 0.1, ""), ("call", "failed", 3.0, failed),
          ("teardown", "passed", 0.1, ""))
    _play("tests/gpu/test_b.py::test_three", ("setup", "failed", 7.0, "E   ImportError: cannot import name 'X'"),
          ("teardown", "passed", 0.0, ""))
    gpu_summary.pytest_runtest_logstart("tests/gpu/test_b.py::test_hangs", None)  # the part is cut here
    saved = json.loads(path.read_text())
    assert [t["outcome"] for t in saved["tests"]] == ["passed", "failed", "error"]
    assert saved["tests"][0]["duration_s"] == 4.0 and saved["counts"] == {"passed": 1, "failed": 1, "error": 1}
    assert saved["running"]["nodeid"] == "tests/gpu/test_b.py::test_hangs"
    result = tmp_path / "eval.json"
    result.write_text(json.dumps({"n": 2, "gpu": "NVIDIA H200", "kevin": {
        "wall_s": 12.0, "candidates_per_minute": 10.0, "gpu_stage_s": {"median": 1.25, "p90": 1.5}, "lanes": 1,
        "verdicts": {"a": {"stage": "timing", "ok": True}, "b": {"stage": "compile", "ok": False}}}}))
    gpu_summary.add_bench(path, "eval_bench", 0, 80.4, result)
    page = make_results.render(tmp_path / "results")
    assert "## 2026-12-03" in page and "commit `0123456789ab` (tree dirty)" in page
    assert "**1 error, 1 failed, 1 passed**; running when cut: `tests/gpu/test_b.py::test_hangs`" in page
    assert "**cut before its end**" in page
    assert "| `tests/gpu/test_a.py` | 1 | 1 | 0 | 0 | 7.2 |" in page
    assert "- failed: `tests/gpu/test_a.py::test_two`: AssertionError: load verdict" in page
    assert "- error: `tests/gpu/test_b.py::test_three`: ImportError: cannot import name 'X'" in page
    assert "| candidates fully evaluated per minute | **10.0** (2 in 12.0 s wall) |" in page
    assert "| eval_bench | 0 | 80 |" in page


def test_an_unknown_file_is_listed_not_dropped(tmp_path: Path) -> None:
    (tmp_path / "2026-12-04-h200-something.json").write_text('{"figure": 3}')
    page = make_results.render(tmp_path)
    assert "### `2026-12-04-h200-something.json`" in page and "does not know" in page


def test_check_fails_on_a_hand_edited_page(tmp_path: Path) -> None:
    page = tmp_path / "RESULTS.md"
    page.write_text(make_results.render().replace("**16.2**", "**20.1**"))
    assert make_results.main(["--check", "--page", str(page)]) == 1
    page.write_text(make_results.render())
    assert make_results.main(["--check", "--page", str(page)]) == 0
