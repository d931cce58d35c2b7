"""Accepting into real temporary git repositories: exactly our files, the user's work untouched."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import git
import pytest
from accept_support import MODULE, committed_paths, fixture_candidate, good_timing, good_verdict, make_record, make_repo

from kevin_agent.accept import accept, find_accepted, plan_accept, undo_last
from kevin_agent.accept.files import write_files
from kevin_agent.data import TimingStats
from kevin_agent.errors import EnvironmentProblem, UserInputError

OUR_FILES = {"models/fused_block_kernel.cu", "models/fused_block_kernel.cpp", "models/fused_block_cuda.py",
             "models/test_fused_block_cuda.py"}


def _plan(root: Path, **kwargs):
    return plan_accept(make_record(root / MODULE, fixture_candidate("gelu"), **kwargs))


def _untouched(root: Path) -> bool:
    return not any((root / name).exists() for name in OUR_FILES)


def test_commit_contains_exactly_our_files_and_user_work_stays(tmp_path):
    repo = make_repo(tmp_path)
    before = repo.head.commit.hexsha
    (tmp_path / "README.md").write_text("project\nstaged line\n")
    repo.index.add(["README.md"])
    (tmp_path / "notes.txt").write_text("untracked\n")
    (tmp_path / MODULE).write_text((tmp_path / MODULE).read_text() + "\n# unstaged edit\n")

    result = accept(_plan(tmp_path), commit=True)

    assert result.sha == repo.head.commit.hexsha and repo.head.commit.parents[0].hexsha == before
    assert committed_paths(repo) == OUR_FILES
    assert repo.active_branch.name == "main"
    # the staged change is still staged, not committed
    assert [d.a_path for d in repo.index.diff("HEAD")] == ["README.md"]
    assert repo.git.show("HEAD:README.md") == "project"
    assert repo.git.show(":README.md") == "project\nstaged line"
    # the unstaged edit and the untracked file are as they were
    assert [d.a_path for d in repo.index.diff(None)] == [MODULE]
    assert (tmp_path / MODULE).read_text().endswith("# unstaged edit\n")
    assert "notes.txt" in repo.untracked_files
    # our files are committed and clean
    status = repo.git.status("--porcelain", "--", *OUR_FILES)
    assert status == ""
    for name in OUR_FILES:
        assert repo.git.show(f"HEAD:{name}") + "\n" == (tmp_path / name).read_text()


def test_commit_message_subject_body_and_trailers(tmp_path):
    repo = make_repo(tmp_path)
    result = accept(_plan(tmp_path), commit=True)
    message = repo.head.commit.message
    assert message == result.message
    lines = message.splitlines()
    assert lines[0] == "kevin: CUDA kernel for FusedBlock (1.84x eager, 1.21x torch.compile, NVIDIA H200)"
    for expected in ("Run:            r20261202-1 (4 trajectories x 4 turns)",
                     "Candidate:      t1.3 (trajectory 1, turn 3)",
                     "Correctness:    5/5 trials on fresh random inputs, atol 0.0001, rtol 0.0001 (max abs error "
                     "2.4e-07)",
                     "Timing:         kernel 0.412 ms, eager 0.758 ms, torch.compile 0.498 ms (median of 100 trials)",
                     "Speed of light: 62% of the GPU's peak",
                     "Environment:    NVIDIA H200, torch 2.14.1, CUDA 13.0",
                     "  models/fused_block_kernel.cu"):
        assert expected in lines
    assert lines[-2:] == ["Kevin-Run: r20261202-1", "Kevin-Candidate: t1.3"]
    # git itself recognises the trailers
    assert repo.git.log("-1", "--format=%(trailers:key=Kevin-Run,valueonly)").strip() == "r20261202-1"
    assert repo.git.log("-1", "--format=%(trailers:key=Kevin-Candidate,valueonly)").strip() == "t1.3"


def test_slower_than_torch_compile_is_said_plainly(tmp_path):

    make_repo(tmp_path)
    slower = TimingStats(0.553, 0.55, 0.545, 0.56, 0.01, 100)  # torch.compile's 0.498 ms is 0.90x of it
    plan = _plan(tmp_path, verdict=good_verdict(replace(good_timing(), kernel=slower, speedup_vs_compile=0.9)))
    assert plan.commit_message.splitlines()[0].endswith("(1.84x eager, 0.90x torch.compile, NVIDIA H200)")
    assert "torch.compile is faster than this kernel" in plan.commit_message
    assert "torch.compile is the better choice for this module: the kernel (t1.3) runs 1.84x vs eager, 0.90x vs " \
           "torch.compile on NVIDIA H200." in plan.notes


def test_slower_than_both_baselines_never_says_it_beats_eager(tmp_path):

    make_repo(tmp_path)
    plan = _plan(tmp_path, verdict=good_verdict(replace(good_timing(), speedup_vs_eager=0.67, speedup_vs_compile=0.8)))
    text = " ".join(plan.commit_message.split())  # the note is wrapped at 72 columns
    assert "Note: this kernel is not faster than eager PyTorch or torch.compile on NVIDIA H200." in text
    assert "beats eager" not in text


def test_existing_target_with_other_content_is_refused(tmp_path):
    repo = make_repo(tmp_path)
    target = tmp_path / "models" / "fused_block_cuda.py"
    target.write_text("# mine\n")
    with pytest.raises(UserInputError, match="models/fused_block_cuda.py already exists with other content"):
        _plan(tmp_path)
    plan_target = tmp_path / "models" / "fused_block_kernel.cu"
    assert target.read_text() == "# mine\n" and not plan_target.exists()
    assert repo.head.commit.message == "initial"


def test_target_changed_after_planning_is_refused_with_nothing_written(tmp_path):
    repo = make_repo(tmp_path)
    plan = _plan(tmp_path)
    (tmp_path / "models" / "test_fused_block_cuda.py").write_text("# user test\n")
    with pytest.raises(UserInputError, match="already exists with other content"):
        accept(plan, commit=True)
    assert not (tmp_path / "models" / "fused_block_kernel.cu").exists()
    assert repo.head.commit.message == "initial"


def test_target_with_staged_changes_is_refused(tmp_path):
    repo = make_repo(tmp_path)
    plan = _plan(tmp_path)
    cu = tmp_path / "models" / "fused_block_kernel.cu"
    cu.write_text("// staged by the user\n")
    repo.index.add(["models/fused_block_kernel.cu"])
    cu.write_text(plan.files[cu])  # same bytes on disk as ours, but a different version staged
    with pytest.raises(UserInputError, match="models/fused_block_kernel.cu has staged changes"):
        accept(plan, commit=True)
    assert repo.git.show(":models/fused_block_kernel.cu") == "// staged by the user"
    assert not (tmp_path / "models" / "fused_block_cuda.py").exists()


def test_no_commit_then_commit_and_already_committed(tmp_path):
    repo = make_repo(tmp_path)
    written = accept(_plan(tmp_path), commit=False)
    assert written.sha is None and not _untouched(tmp_path)
    assert repo.head.commit.message == "initial"
    assert set(repo.untracked_files) == OUR_FILES
    committed = accept(_plan(tmp_path), commit=True)  # identical files on disk: ours, fine to commit
    assert committed_paths(repo) == OUR_FILES and committed.sha == repo.head.commit.hexsha
    with pytest.raises(UserInputError, match="already committed"):
        accept(_plan(tmp_path), commit=True)


def test_not_a_repository(tmp_path):
    (tmp_path / "models").mkdir()
    from accept_support import fixture_task

    (tmp_path / MODULE).write_text(fixture_task("gelu"))
    with pytest.raises(UserInputError, match="not inside a git repository: pass --no-commit"):
        accept(_plan(tmp_path), commit=True)
    assert _untouched(tmp_path)
    result = accept(_plan(tmp_path), commit=False)
    assert result.sha is None and {p.name for p in result.paths} == {Path(n).name for n in OUR_FILES}


def test_detached_head_needs_a_branch(tmp_path):
    repo = make_repo(tmp_path)
    start = repo.head.commit.hexsha
    repo.head.reference = repo.head.commit  # detach
    assert repo.head.is_detached
    with pytest.raises(UserInputError, match="HEAD is detached: .*--branch NAME"):
        accept(_plan(tmp_path), commit=True)
    assert _untouched(tmp_path)
    result = accept(_plan(tmp_path), commit=True, branch="kevin/fused-block")
    assert not repo.head.is_detached and repo.active_branch.name == "kevin/fused-block"
    assert repo.heads["kevin/fused-block"].commit.hexsha == result.sha
    assert repo.commit(result.sha).parents[0].hexsha == start
    assert repo.heads["main"].commit.hexsha == start
    assert committed_paths(repo) == OUR_FILES
    with pytest.raises(UserInputError, match="branch 'main' already exists"):
        accept(_plan(tmp_path), commit=True, branch="main")


def test_merge_in_progress_is_refused(tmp_path):
    repo = make_repo(tmp_path)
    repo.git.switch("-c", "other")
    (tmp_path / "README.md").write_text("other side\n")
    repo.index.add(["README.md"])
    repo.index.commit("other")
    repo.git.switch("main")
    (tmp_path / "README.md").write_text("main side\n")
    repo.index.add(["README.md"])
    repo.index.commit("main")
    with pytest.raises(git.exc.GitCommandError):
        repo.git.merge("other")
    assert (Path(repo.git_dir) / "MERGE_HEAD").exists()
    with pytest.raises(UserInputError, match="a merge is in progress"):
        accept(_plan(tmp_path), commit=True)
    assert _untouched(tmp_path)


def test_failed_commit_rolls_back_the_files(tmp_path):
    repo = make_repo(tmp_path)
    lock = Path(repo.git_dir) / "refs" / "heads" / "main.lock"
    lock.write_text("")
    index_before = (Path(repo.git_dir) / "index").read_bytes()
    with pytest.raises(UserInputError, match="nothing was committed or written"):
        accept(_plan(tmp_path), commit=True)
    assert _untouched(tmp_path)
    assert repo.head.commit.message == "initial"
    assert (Path(repo.git_dir) / "index").read_bytes() == index_before


def test_write_files_is_all_or_nothing(tmp_path):
    (tmp_path / "blocker").write_text("a file where a folder is needed\n")
    files = {tmp_path / "a.txt": "a\n", tmp_path / "new" / "b.txt": "b\n", tmp_path / "blocker" / "c.txt": "c\n"}
    with pytest.raises(EnvironmentProblem, match="nothing was written"):
        write_files(files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker"]


def test_undo_reverts_with_a_new_commit(tmp_path):
    repo = make_repo(tmp_path)
    (tmp_path / "README.md").write_text("project\nstaged\n")
    repo.index.add(["README.md"])
    accepted = accept(_plan(tmp_path), commit=True)
    sha = undo_last(tmp_path)
    head = repo.head.commit
    assert head.hexsha == sha and head.parents[0].hexsha == accepted.sha  # a new commit, not a reset
    assert str(head.message).startswith('Revert "kevin: CUDA kernel for FusedBlock')
    assert f"Kevin-Revert: {accepted.sha}" in head.message
    assert committed_paths(repo) == OUR_FILES
    assert _untouched(tmp_path)
    assert repo.git.status("--porcelain", "--", *OUR_FILES) == ""
    assert repo.git.show(":README.md") == "project\nstaged" and repo.git.show("HEAD:README.md") == "project"
    with pytest.raises(UserInputError, match="no kevin-agent commit to undo"):
        undo_last(tmp_path)


def test_undo_refused_after_the_files_changed(tmp_path):
    repo = make_repo(tmp_path)
    accept(_plan(tmp_path), commit=True)
    cu = tmp_path / "models" / "fused_block_kernel.cu"
    cu.write_text(cu.read_text() + "// tuned by hand\n")
    with pytest.raises(UserInputError, match="models/fused_block_kernel.cu has uncommitted changes"):
        undo_last(tmp_path)
    repo.index.add(["models/fused_block_kernel.cu"])
    repo.index.commit("hand tuning")
    with pytest.raises(UserInputError, match="changed in a later commit"):
        undo_last(tmp_path)
    assert repo.head.commit.message == "hand tuning"


def test_find_accepted_reads_the_header(tmp_path):
    make_repo(tmp_path)
    assert find_accepted(tmp_path, tmp_path / MODULE, "FusedBlock") is None
    accept(_plan(tmp_path), commit=True)
    found = find_accepted(tmp_path, tmp_path / MODULE, "FusedBlock")
    assert found is not None
    assert (found.speedup_vs_eager, found.speedup_vs_compile, found.gpu, found.run_id) == (
        1.84, 1.21, "NVIDIA H200", "r20261202-1")
    assert found.kernel_path == (tmp_path / "models" / "fused_block_kernel.cu").resolve()
    assert find_accepted(tmp_path, tmp_path / MODULE, "OtherBlock") is None


def test_first_commit_of_an_empty_repository(tmp_path):
    repo = git.Repo.init(tmp_path, initial_branch="main")
    with repo.config_writer() as config:
        config.set_value("user", "name", "Test User")
        config.set_value("user", "email", "test@example.com")
    from accept_support import fixture_task

    (tmp_path / "models").mkdir()
    (tmp_path / MODULE).write_text(fixture_task("gelu"))
    repo.index.add([MODULE])  # the user's staged, never committed module
    result = accept(_plan(tmp_path), commit=True)
    commit = repo.commit(result.sha)
    assert commit.parents == () and repo.active_branch.name == "main"
    assert {item.path for item in commit.tree.traverse() if isinstance(item, git.Blob)} == OUR_FILES
    assert repo.git.diff("--cached", "--name-only").split() == [MODULE]  # still staged, not committed
