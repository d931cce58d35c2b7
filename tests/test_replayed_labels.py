"""Replayed verdicts keep the GPU and run they were measured in and say so everywhere they appear:
the replay evaluator, the verdict text, the CLI's lines and tables, the report, the LSP question,
the accepted files and the commit message (a real git repository)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from accept_support import MODULE, fixture_candidate, good_verdict, make_record, make_repo

from kevin_agent.accept import accept, find_accepted, plan_accept
from kevin_agent.data import Candidate, Stage, Task, Verdict, VerdictDetails
from kevin_agent.evaluate.replay import ReplayEvaluator
from kevin_agent.events import VerdictReady
from kevin_agent.progress import print_run_result, verdict_line
from kevin_agent.report import render_html
from kevin_agent.run_record import RunRecord
from kevin_agent.verdict_records import EnvironmentRecord, TimingRecord
from kevin_agent.verdict_text import gpu_short, measured_label, render_verdict, replay_note

KERNELS = Path(__file__).parent / "fixtures" / "kernels"
GOOD = (KERNELS / "add_candidate.py").read_text()
TASK = Task(source=(KERNELS / "add_task.py").read_text(), class_name="Model")
MEASURED = "measured on NVIDIA H200 in run rec-7, replayed here"


def recorded(environment: EnvironmentRecord | None = None) -> dict:
    details = VerdictDetails(timing=TimingRecord(speedup_vs_eager=2.0), environment=environment or EnvironmentRecord())
    return Verdict(Stage.TIMING, True, "fast", details).to_dict()


def replayed_verdict() -> Verdict:
    return good_verdict(
        environment=EnvironmentRecord(
            gpu_name="NVIDIA H200", torch_version="2.14.1", cuda_version="13.0", replayed=True, measured_in="rec-7"
        )
    )


def test_replay_keeps_the_recorded_gpu_and_run_and_marks_the_verdict_replayed(tmp_path):
    path = tmp_path / "replay.json"
    where = EnvironmentRecord(gpu_name="NVIDIA H200", measured_in="rec-7")
    path.write_text(json.dumps({"by_marker": {"# one": recorded(where)}, "default": recorded()}))
    with_gpu, without = ReplayEvaluator(path).evaluate(TASK, [GOOD + "# one\n", GOOD])
    assert with_gpu.details.environment.replayed and with_gpu.details.environment.gpu_name == "NVIDIA H200"
    assert with_gpu.details.environment.measured_in == "rec-7"
    assert without.details.environment.replayed and without.details.environment.gpu_name == "replay"  # names no GPU
    assert measured_label(with_gpu.details) == MEASURED
    assert measured_label(without.details) == "recorded with no GPU named, replayed here"
    assert (gpu_short(with_gpu.details), gpu_short(without.details)) == ("NVIDIA H200, replayed", "replay")
    # a verdict measured here is named plainly
    assert measured_label(good_verdict().details) == "NVIDIA H200" and not good_verdict().details.environment.replayed


def test_static_rejections_are_made_here_not_replayed(tmp_path):
    path = tmp_path / "replay.json"
    path.write_text(json.dumps({"default": recorded(EnvironmentRecord(gpu_name="NVIDIA H200"))}))
    hack = ("import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n"
            "        return a + b\n")
    verdict = ReplayEvaluator(path).evaluate(TASK, [hack])[0]
    assert verdict.stage is Stage.STATIC and not verdict.details.environment.replayed


def test_verdict_text_and_cli_lines_say_replayed():
    text = render_verdict(replayed_verdict())
    assert "[replayed: not measured here]" in text.splitlines()[0]
    assert f"gpu: {MEASURED}" in text
    line = verdict_line(VerdictReady("run", Candidate(0, 1, id="t0.1"), replayed_verdict()))
    assert line.endswith("(replayed)")
    assert "replayed" not in render_verdict(good_verdict())


def _record(verdict: Verdict) -> RunRecord:
    return RunRecord("run-1", TASK, {"trajectories": 1, "turns": 1}, "done", "2026-12-02T10:00:00",
                     [(Candidate(0, 0, id="t0.0", code=GOOD), verdict)])


def test_run_table_report_and_lsp_question_say_replayed():
    from rich.console import Console

    record = _record(replayed_verdict())
    out = io.StringIO()
    print_run_result(Console(file=out, width=200), record)
    assert f"{MEASURED}: a win over both" in out.getvalue()  # the conclusion says it, once
    assert "Recorded verdicts, not measured on this machine" not in out.getvalue()
    assert MEASURED in render_html(record, b"")
    assert replay_note(_record(good_verdict())) is None

    from kevin_agent.lsp.runs import RunState

    state = RunState("a", "Block", TASK, 1, 1, status="done")
    best = (Candidate(0, 0, id="t0.0"), replayed_verdict())
    from kevin_agent.events import RunDone

    state.view.apply(VerdictReady("run", *best))
    state.view.apply(RunDone("run", *best))
    from kevin_agent.lsp.reporting import result_message

    assert result_message(state) == f"Kevin: 1.84x vs eager for Block (1.21x vs torch.compile; {MEASURED})"
    assert state.summary() == "Kevin: done, 1.84x vs eager (replayed, not measured here) (accept, show diff or discard)"


def test_accepting_a_replayed_verdict_says_so_in_the_commit_and_the_files(tmp_path):
    repo = make_repo(tmp_path)
    record = make_record(tmp_path / MODULE, fixture_candidate("gelu"), replayed_verdict())
    plan = plan_accept(record, repo_root=tmp_path)
    assert any(MEASURED in note for note in plan.notes)
    result = accept(plan)
    message = str(repo.head.commit.message)
    subject, body = message.split("\n", 1)
    assert subject == "kevin: CUDA kernel for FusedBlock (1.84x eager, 1.21x torch.compile, NVIDIA H200, replayed)"
    assert "verified by kevin-agent on the GPU" not in message
    assert MEASURED in " ".join(body.split())  # wrapped at 72 columns
    assert "did not check or time it" in " ".join(body.split())
    assert "(recorded, replayed here)" in message  # the correctness line
    assert "Environment:" in message and "(measured in run rec-7, replayed here)" in message
    assert result.sha == repo.head.commit.hexsha
    found = find_accepted(tmp_path, tmp_path / MODULE, "FusedBlock")
    assert found is not None and found.gpu == "NVIDIA H200, replayed"  # the code lens shows it


def test_a_verdict_measured_here_keeps_the_verified_wording(tmp_path):
    repo = make_repo(tmp_path)
    accept(plan_accept(make_record(tmp_path / MODULE, fixture_candidate("gelu")), repo_root=tmp_path))
    message = str(repo.head.commit.message)
    assert message.startswith("kevin: CUDA kernel for FusedBlock (1.84x eager, 1.21x torch.compile, NVIDIA H200)\n")
    assert "verified by kevin-agent on the GPU" in message and "replayed" not in message


def test_prompts_never_name_the_replay_evaluator_as_the_gpu(tmp_path):
    from kevin_agent.loop.runtime import target_gpu_name
    from kevin_agent.loop.settings import RunSettings

    path = tmp_path / "replay.json"
    path.write_text(json.dumps({"default": recorded(EnvironmentRecord(gpu_name="NVIDIA H200"))}))
    settings = RunSettings()
    settings.backend.target_gpu = "NVIDIA A100"
    named = target_gpu_name(ReplayEvaluator(path), settings)  # this machine's GPU, else the setting
    assert "replay" not in named and named in ("NVIDIA A100", _device_name())


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no device"


def _png_text(png: bytes) -> dict[str, str]:
    """The PNG's tEXt chunks (what a viewer shows as the image's title)."""
    import struct

    chunks, at = {}, 8
    while at < len(png):
        length, kind = struct.unpack(">I4s", png[at:at + 8])
        if kind == b"tEXt":
            key, _, value = png[at + 8:at + 8 + length].partition(b"\0")
            chunks[key.decode("latin-1")] = value.decode("latin-1")
        at += 12 + length
    return chunks


def test_report_png_title_names_the_gpu_and_run_of_replayed_verdicts(tmp_path):
    from kevin_agent.report import plot_title, write_report

    files = write_report(_record(replayed_verdict()), tmp_path)
    title = _png_text(files.png.read_bytes())["Title"]
    assert title == f"Model, run run-1: {MEASURED}"
    assert plot_title(_record(good_verdict())) == "Model, run run-1"  # measured here: no label
    assert "<td>NVIDIA H200, replayed</td>" in files.html.read_text()  # the HTML table's rows


def test_cli_table_rows_say_where_each_verdict_was_measured():
    from rich.console import Console

    from kevin_agent.run_table import candidate_rows

    static = Verdict(
        Stage.STATIC, False, "rejected", VerdictDetails(environment=EnvironmentRecord(gpu_name="replay", replayed=True))
    )
    record = RunRecord("run-1", TASK, {"trajectories": 1, "turns": 2}, "done", "2026-12-02T10:00:00",
                       [(Candidate(0, 0, id="t0.0", code=GOOD), replayed_verdict()),
                        (Candidate(0, 1, id="t0.1", code=GOOD), static)])
    out = io.StringIO()
    print_run_result(Console(file=out, width=200), record)
    rows = {line.split()[1]: line for line in out.getvalue().splitlines() if line.startswith("│ t0.")}
    assert rows["t0.0"].rstrip(" │").endswith("NVIDIA H200, replayed")
    assert rows["t0.1"].rstrip(" │").endswith("-")  # a static rejection is made here, by no GPU
    assert [r.measured_on for r in candidate_rows(record)] == ["NVIDIA H200, replayed", None]
