"""What the evaluator cannot trust earns nothing (issue 23): every trust check through the RL
export (score 0, flags listed), the bests (run, loop, beam, early stop, live view, report), accept
(refused; ``--force`` commits with a warning), the CLI's labels, and the model's feedback."""

from __future__ import annotations

import json
from pathlib import Path

import git
import loop_fixtures
import pytest
from accept_support import MODULE, fixture_candidate, good_verdict, make_record, make_repo
from trust_fixtures import REASONS, TRUST_VERDICTS, flagged

from kevin_agent import cli, feedback
from kevin_agent.data import Candidate, Verdict, VerdictDetails, flag_untrusted
from kevin_agent.evaluate.worker.speed_of_light import timing_flags
from kevin_agent.evaluate.worker.stages import _passed_message, settle_flags
from kevin_agent.events import VerdictReady
from kevin_agent.export import rl_samples, score
from kevin_agent.loop.trajectories import Trajectory, best_of, fork_beam
from kevin_agent.progress import verdict_line
from kevin_agent.report import report_data
from kevin_agent.run_table import conclude
from kevin_agent.runs.state import RunView
from kevin_agent.store import RunStore
from kevin_agent.verdict_records import TrustRecord

FLAGS = sorted(REASONS)
KINDS = [(name, old) for name in FLAGS for old in (False, True)]
KIND_IDS = [f"{name}-{'old' if old else 'new'}" for name, old in KINDS]


def marker(name: str, old: bool) -> str:
    return f"{'old' if old else 'flag'}-{name}"


@pytest.fixture()
def trust_verdicts(monkeypatch):
    monkeypatch.setattr(loop_fixtures, "VERDICTS", TRUST_VERDICTS)


# -- the verdict ------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "old"), KINDS, ids=KIND_IDS)
def test_each_flag_makes_the_verdict_untrusted_and_not_correct(name, old):
    verdict = Verdict.from_dict(json.loads(json.dumps(flagged(name, old_style=old))))
    assert verdict.passed and not verdict.trusted and not verdict.correct
    assert [f.name for f in verdict.trust_flags] == [name]
    assert verdict.speedup == 0.0 and not verdict.counts_as_best and score(verdict) == 0.0
    stored = verdict.to_dict()
    assert stored["correct"] is False and stored["trusted"] is False


def test_an_old_flag_with_no_or_unknown_reason_still_counts_as_untrusted():
    bare = Verdict.from_dict(loop_fixtures.timed(2.0))
    assert bare.trusted and bare.correct and score(bare) == pytest.approx(2.3)
    raw = loop_fixtures.timed(2.0)
    raw["details"]["trust"].update(suspicious=True, reasons=[], flags=[])
    assert [f.name for f in Verdict.from_dict(raw).trust_flags] == ["unclassified"]
    raw["details"]["trust"]["reasons"] = ["something a later check said"]
    unknown = Verdict.from_dict(raw)
    assert [(f.name, f.reason) for f in unknown.trust_flags] == [("unclassified", "something a later check said")]
    assert not unknown.correct and score(unknown) == 0.0
    raw["details"]["trust"].update(suspicious=False, reasons=[],
                                   flags=[{"name": "escaped_stream", "reason": "r"}])  # a flag alone
    assert not Verdict.from_dict(raw).trusted


# -- the worker --------------------------------------------------------------------------------


def test_timing_checks_name_their_flags_with_fixed_thresholds():
    assert timing_flags(1.0, 10.0) == []  # at the limits: believed
    named = [name for name, _ in timing_flags(1.01, 10.5, "work escapes the timed stream: x")]
    assert named == ["beyond_speed_of_light", "implausible_speedup", "escaped_stream"]


def test_the_provenance_reason_gets_its_flag_once_and_the_feedback_says_it_earned_nothing():
    d = VerdictDetails(trust=TrustRecord(suspicious=True, reasons=[REASONS["provenance_unchecked"]]))
    settle_flags(d)
    settle_flags(d)
    assert [f.name for f in d.trust.flags] == ["provenance_unchecked"] and len(d.trust.reasons) == 1
    flag_untrusted(d, "escaped_stream", REASONS["escaped_stream"])
    message = _passed_message(d, feedback.correct(5.0))
    assert message.startswith("Your answer was not trusted, so it counts as incorrect and earned nothing: "
                              "provenance not checked: no kernels could be listed")
    assert "; work escapes the timed stream: 0.0040 ms" in message
    assert "speedup of 5.00x" not in message  # a number the evaluator does not believe is not fed back
    trusted = VerdictDetails()
    assert _passed_message(trusted, feedback.correct(1.5)) == feedback.correct(1.5)


def test_feedback_for_an_untrusted_answer_speaks_like_the_other_rejections():
    text = feedback.untrusted(["faster than the GPU's speed of light (1.30x of it)."])
    assert text.startswith("Your answer was not trusted, so it counts as incorrect and earned nothing: "
                           "faster than the GPU's speed of light (1.30x of it). ")
    assert feedback.incorrect("x").startswith("Your answer was ")
    assert "no reason" not in feedback.untrusted([]) and "earned nothing" in feedback.untrusted([])


# -- export -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "old"), KINDS, ids=KIND_IDS)
def test_each_flag_kind_scores_zero_in_the_export_and_is_listed(tmp_path, trust_verdicts, name, old):
    plan = {0: ["slow", marker(name, old), "quick"], 1: ["wrong", "quick", "broken"]}
    store = loop_fixtures.stored_run(tmp_path, plan)
    samples = {s.candidate_id: s for s in rl_samples(store.load_run("run-1"), {})}
    hacked = samples["t0.1"]
    assert (hacked.score, hacked.correct, hacked.speedup, hacked.flags) == (0.0, False, 0.0, [name])
    # trusted samples keep Kevin's reward: 0.3 + speedup
    assert samples["t0.0"].score == pytest.approx(1.1) and samples["t1.1"].score == pytest.approx(2.3)
    assert all(s.flags == [] for cid, s in samples.items() if cid != "t0.1")
    assert samples["t0.0"].discounted_return == pytest.approx(1.1 + 0.16 * 2.3)  # nothing from t0.1


def test_the_export_documents_what_untrusted_samples_score():
    import kevin_agent.export as export

    assert "not trust" in (export.__doc__ or "") and "score 0" in (export.__doc__ or "")
    docs = (Path(__file__).parents[1] / "docs" / "loop.md").read_text()
    assert "`flags` lists the trust checks" in docs and "its sample scores 0" in docs


# -- bests --------------------------------------------------------------------------------------


def _pair(cid: str, raw: dict) -> tuple[Candidate, Verdict]:
    trajectory, turn = (int(x) for x in cid[1:].split("."))
    return Candidate(trajectory, turn, id=cid), Verdict.from_dict(raw)


@pytest.mark.parametrize(("name", "old"), KINDS, ids=KIND_IDS)
def test_an_untrusted_verdict_is_never_a_best(tmp_path, trust_verdicts, name, old):
    plan = {0: ["slow", marker(name, old), "slow"], 1: ["wrong", "modest", "broken"]}
    record = loop_fixtures.stored_run(tmp_path, plan).load_run("run-1")
    best = record.best()
    assert best is not None and best[0].id == "t1.1"  # 1.2x, not the flagged 5x
    assert record.best_speedup() == pytest.approx(1.2)
    assert RunView.from_record(record).best_speedup == pytest.approx(1.2)
    assert report_data(record).series[0] == [0.8, 0.8, 0.8]  # the flagged 5x never plotted
    assert RunStore.for_path(tmp_path).list_runs()[0].best_speedup == pytest.approx(1.2)

    view = RunView()
    hacked = _pair("t0.1", flagged(name, old_style=old))
    view.apply(VerdictReady("run-1", *hacked))
    assert view.best is None and view.best_speedup == 0.0
    assert view.trajectory_state[0].startswith("not trusted: ")


def test_loop_best_beam_and_early_stop_ignore_untrusted_speedups():
    hack = Trajectory(0, [_pair("t0.0", flagged("escaped_stream", speedup=40.0))])
    honest = Trajectory(1, [_pair("t1.0", loop_fixtures.timed(1.2))])
    assert hack.best_speedup == 0.0 and best_of([hack, honest]) == pytest.approx(1.2)
    forked = fork_beam([hack, honest], keep=1)
    assert [lane.last_id for lane in forked] == ["t1.0", "t1.0"]


def test_a_session_does_not_stop_early_on_an_untrusted_speedup(tmp_path):
    from trust_fixtures import write_trust_replay

    from kevin_agent.backends.scripted import ScriptedBackend
    from kevin_agent.config import BackendSettings
    from kevin_agent.evaluate.replay import ReplayEvaluator
    from kevin_agent.loop.session import RunSettings, Session
    from kevin_agent.task import load_task

    script = loop_fixtures.write_script(tmp_path / "script.json", {
        (0, 0): "flag-beyond_speed_of_light", (1, 0): "slow", (0, 1): "slow", (1, 1): "quick"})
    settings = RunSettings(trajectories=2, turns=2, target_speedup=1.5, beam_keep=1,
                           backend=BackendSettings(backend="scripted", script=str(script)))
    backend = ScriptedBackend(script)
    record = Session(load_task(f"{loop_fixtures.TASK_FILE}::Model"), settings, backend,
                     ReplayEvaluator(write_trust_replay(tmp_path / "replay.json")),
                     RunStore(tmp_path / "runs.sqlite")).run()
    assert [c.id for c, _ in record.candidates] == ["t0.0", "t1.0", "t0.1", "t1.1"]  # no early stop at 5x
    assert record.parents["t0.1"] == "t1.0"  # the beam kept the honest 0.8x, not the flagged 5x
    best = record.best()
    assert best is not None and best[0].id == "t1.1"
    turn1 = [m.content for m in backend.requests[1][0] if m.role == "user"][-1]
    assert "earned nothing" not in turn1  # trajectory 0 now continues trajectory 1's history


# -- accept -------------------------------------------------------------------------------------


@pytest.fixture()
def flagged_repo(tmp_path, monkeypatch):
    repo = make_repo(tmp_path)
    verdict = good_verdict()
    flag_untrusted(verdict.details, "beyond_speed_of_light", REASONS["beyond_speed_of_light"])
    record = make_record(tmp_path / MODULE, fixture_candidate("gelu"), verdict)
    store = RunStore.for_path(tmp_path)
    store.create_run(record.run_id, record.task, record.settings)
    for candidate, v in record.candidates:
        store.add_candidate(record.run_id, candidate, [])
        assert v is not None
        store.add_verdict(record.run_id, candidate.id, v)
    store.set_status(record.run_id, "done")
    store.close()
    monkeypatch.chdir(tmp_path)
    return repo


def test_accept_refuses_an_untrusted_candidate_without_force(flagged_repo, capsys):
    assert cli.main(["accept", "latest", "t1.3", "--commit"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "t1.3 is not trusted: faster than the GPU's speed of light" in err and "--force" in err
    assert cli.main(["accept", "latest", "--commit"]) == 2  # never the run's best
    err = capsys.readouterr().err
    assert "no correct, timed candidate" in err and "t1.3 --force" in err
    assert flagged_repo.head.commit.message == "initial"
    assert cli.main(["diff", "latest", "t1.3"]) == 2


def test_accept_force_commits_with_a_warning_in_the_message(flagged_repo, capsys):
    assert cli.main(["accept", "latest", "t1.3", "--commit", "--force"]) == 0
    out = capsys.readouterr().out
    assert "note: not trusted: faster than the GPU's speed of light" in out
    message = str(git.Repo(flagged_repo.working_tree_dir).head.commit.message)
    subject = message.splitlines()[0]
    assert subject.startswith("kevin: CUDA kernel for FusedBlock (not trusted: faster than speed of light")
    assert "1.84x" not in subject  # numbers the evaluator does not believe are not headlined
    flat = " ".join(message.split())
    assert "WARNING: not trusted: faster than the GPU's speed of light" in flat
    assert "Accepted with --force" in flat and "Kevin-Candidate: t1.3" in message


def test_accept_force_never_takes_an_incorrect_candidate(tmp_path):
    from kevin_agent.accept import plan_accept
    from kevin_agent.data import Stage
    from kevin_agent.errors import UserInputError

    make_repo(tmp_path)
    wrong = Verdict(Stage.CORRECTNESS, False, "mismatch")
    with pytest.raises(UserInputError, match="not correct"):
        plan_accept(make_record(tmp_path / MODULE, fixture_candidate("gelu"), wrong), "t1.3",
                    repo_root=tmp_path, force=True)


# -- the CLI's faces ------------------------------------------------------------------------------


def test_cli_show_labels_untrusted_candidates(tmp_path, trust_verdicts, monkeypatch, capsys):
    plan = {0: ["wrong", "old-escaped_stream", "flag-implausible_speedup"]}
    loop_fixtures.stored_run(tmp_path, plan)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["show", "latest"]) == 0
    out = capsys.readouterr().out
    assert "yes (not trusted: work escaped the timed stream)" in out
    assert "yes (not trusted: implausible speedup)" in out
    assert "2 kernels matched the reference but were not trusted: work escaped the timed stream; " \
           "implausible speedup; not counted." in " ".join(out.split())
    assert cli.main(["show", "latest", "t0.2"]) == 0
    out = capsys.readouterr().out
    assert "NOT TRUSTED" in out and "not trusted: 12.0x faster than PyTorch eager" in out
    assert "SUSPICIOUS" not in out


def test_the_verdict_line_of_the_cli_and_the_lsp_log_says_not_trusted():
    candidate, verdict = _pair("t0.1", flagged("provenance_unchecked", old_style=True))
    line = verdict_line(VerdictReady("run-1", candidate, verdict))
    assert line == ("  t0.1: timing ok, not trusted: provenance not checked: no kernels could be "
                    "listed in the candidate's extension")


def test_the_run_summary_json_says_which_rows_are_untrusted(tmp_path, trust_verdicts):
    from kevin_agent.run_table import run_summary_dict

    record = loop_fixtures.stored_run(tmp_path, {0: ["slow", "flag-escaped_stream", "wrong"]}).load_run("run-1")
    rows = {r["candidate_id"]: r for r in run_summary_dict(record)["candidates"]}
    assert rows["t0.1"]["untrusted"] == "not trusted: work escaped the timed stream" and rows["t0.1"]["suspicious"]
    assert rows["t0.1"]["speedup_vs_eager"] is None and rows["t0.0"]["untrusted"] == ""
    assert "not trusted" not in conclude(record).text  # a trusted best exists: the table says it


def test_the_html_report_labels_untrusted_rows_and_says_why_there_is_no_best(tmp_path, trust_verdicts):
    from kevin_agent.report import render_html

    plan = {0: ["wrong", "flag-beyond_speed_of_light", "broken"]}
    store = loop_fixtures.stored_run(tmp_path, plan)
    store.set_status("run-1", "done")  # a finished run concludes; an unfinished one says "so far"
    page = render_html(store.load_run("run-1"), b"")
    assert "<td>not trusted: faster than speed of light</td>" in page
    assert ("No correct kernel was found; keep the PyTorch module. 1 kernel matched the reference but was "
            "not trusted: faster than speed of light; not counted.") in page


def test_flags_cross_the_worker_boundary_by_name(tmp_path):
    from kevin_agent.evaluate.protocol import WorkerReply

    verdict = Verdict.from_dict(flagged("escaped_stream"))
    path = tmp_path / "reply.json"
    path.write_text(WorkerReply(verdict=verdict).to_json())
    reply = WorkerReply.read(path)
    assert reply is not None and reply.verdict is not None
    assert [(f.name, f.reason) for f in reply.verdict.details.trust.flags] == [
        ("escaped_stream", REASONS["escaped_stream"])]
    assert not reply.verdict.correct


def test_a_candidate_that_disarms_the_trust_checks_is_caught_as_a_patch(monkeypatch):
    """An attacker's move: make the worker's flagging (or the timing checks) do nothing. Both are
    module functions the guards captured at worker start, so the replacement is named."""
    from kevin_agent import data
    from kevin_agent.evaluate.worker import guards, speed_of_light, stages

    captured = guards.capture_references()
    monkeypatch.setattr(stages, "flag_untrusted", lambda *args: None)
    monkeypatch.setattr(data, "flag_untrusted", lambda *args: None)
    monkeypatch.setattr(speed_of_light, "timing_flags", lambda *args: [])
    monkeypatch.setattr(stages, "timing_flags", lambda *args: [])
    assert sorted(guards.find_patched(captured)) == [
        "kevin_agent.data.flag_untrusted", "kevin_agent.evaluate.worker.speed_of_light.timing_flags",
        "kevin_agent.evaluate.worker.stages.flag_untrusted", "kevin_agent.evaluate.worker.stages.timing_flags"]


def test_a_median_far_below_the_profilers_record_is_not_believed():
    """Timing rewritten inside the worker (events recorded late, elapsed times replaced in native
    code) cannot also rewrite CUPTI's kernel timestamps of the profiled call."""
    from kevin_agent.evaluate.worker.timing import profile_disagreement

    assert profile_disagreement(0.05, 0.30) is not None  # a sixth of what the GPU was seen doing
    assert profile_disagreement(0.101, 0.30) is None  # a third: overlapped streams, warm caches
    assert profile_disagreement(0.09, 0.30) is not None
    assert profile_disagreement(0.001, 0.005) is None  # gaps under 0.01 ms are launch noise
    assert profile_disagreement(0.05, None) is None and profile_disagreement(0.05, 0.0) is None
    reason = profile_disagreement(0.01, 0.25) or ""
    named = [name for name, _ in timing_flags(0.5, 2.0, None, 0.01, 0.005, reason)]
    assert named == ["timed_below_profile"]
    assert "0.0100 ms measured" in reason and "0.2500 ms of GPU time" in reason
