"""The user's folders are hidden, not only unreadable, in a confined child (issue 18: Landlock
refuses content but not existence, so ``stat`` and the compiler's ``__has_include`` told which
files a home held). Real children through the launcher; each confined run has its control."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kevin_agent.evaluate.sandbox import compile_policy, launch_command
from kevin_agent.evaluate.sandbox.namespaces import Isolation
from kevin_agent.evaluate.sandbox.policy import SandboxPolicy

PROBE = """
import json, os, sys
work, neighbour, secret = sys.argv[1:4]
def stat(path):
    try:
        os.stat(path)
        return "there"
    except OSError as exc:
        return exc.strerror
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        return exc.strerror
open(os.path.join(work, "written"), "w").write("ok")
print(json.dumps({"neighbour": stat(neighbour), "secret": stat(secret), "parent": listing(os.path.dirname(work)),
                  "work": listing(work), "home": stat(os.path.expanduser("~"))}))
"""


def probe(policy: SandboxPolicy, mode: str, work: Path, neighbour: Path, secret: Path) -> dict:
    argv = [sys.executable, "-c", PROBE, str(work), str(neighbour), str(secret)]
    done = subprocess.run(launch_command(policy, argv, mode), capture_output=True, text=True, timeout=120,
                          cwd=work, stdin=subprocess.DEVNULL, env={**os.environ, "KEVIN_SANDBOX_VERBOSE": "1"})
    assert done.returncode == 0, done.stderr[-1500:]
    return {**json.loads(done.stdout.splitlines()[-1]), "stderr": done.stderr}


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    root = Path(os.path.realpath(tmp_path))
    work, neighbour, repo = root / "work", root / "neighbour", root / "repo"
    for folder in (work, neighbour, repo):
        folder.mkdir()
    (repo / "secret.py").write_text("KEY = 1\n")
    (work / "input.cu").write_text("// the candidate's own file\n")
    return {"root": root, "work": work, "neighbour": neighbour, "repo": repo}


@pytest.mark.timeout(300)
def test_a_compile_child_sees_only_its_own_folder_of_a_hidden_tree(layout: dict[str, Path]) -> None:
    """Confined, the folders beside the compile's own (in a hidden /tmp) and a protected
    repository do not exist, the own folder keeps its files and takes writes; unconfined (the
    control) every one is there."""
    work, repo = layout["work"], layout["repo"]
    policy = compile_policy(work, protect=[repo])
    control = probe(policy, "off", work, layout["neighbour"], repo / "secret.py")
    assert control["neighbour"] == control["secret"] == "there"
    assert set(control["parent"]) >= {"work", "neighbour", "repo"}
    boxed = probe(policy, "required", work, layout["neighbour"], repo / "secret.py")
    assert boxed["neighbour"] == boxed["secret"] == "No such file or directory", boxed
    # the folders down to the granted one are empty stand-ins (Landlock refuses listing them)
    assert boxed["parent"] in ("Permission denied", ["work"]), boxed
    assert boxed["work"] == ["input.cu", "written"] and (work / "written").read_text() == "ok"
    assert "folders hidden" in boxed["stderr"], boxed["stderr"][-500:]


def test_the_policy_hides_the_home_tmp_and_protected_paths_but_never_a_granted_tree(
        layout: dict[str, Path]) -> None:
    work, repo, root = layout["work"], layout["repo"], layout["root"]
    policy = compile_policy(work, protect=[repo])
    assert os.path.realpath("/tmp") in policy.hidden and str(repo) in policy.hidden
    assert str(Path.home().resolve()) in policy.hidden or policy.exposed
    granting = compile_policy(work, extra_read=[root], protect=[repo])  # a granted tree holds the repository
    assert str(repo) not in granting.hidden and any(str(repo) in line for line in granting.exposed)
    assert all(not any(h == g or h.startswith(g.rstrip("/") + "/") for g in granting.granted())
               for h in granting.hidden), (granting.hidden, granting.granted())


def test_the_summary_says_how_many_folders_are_hidden() -> None:
    iso = Isolation(pid_namespace=True, max_processes=1023, how="pid_max", proc_mounted=True,
                    hidden=("/home", "/tmp"))
    assert iso.summary() == "pid namespace, at most 1023 processes, 2 folders hidden"
    assert Isolation(pid_namespace=True, proc_mounted=True).summary() == "pid namespace, no process limit"
