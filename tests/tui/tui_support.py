"""Shared setup for the TUI tests: a real git repository of modules, the scripted backend's
replies, the replay evaluator, and a Pilot helper that waits for a condition."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import git
from loop_fixtures import FIXTURES, write_replay, write_script

from kevin_agent.evaluate.replay import ReplayEvaluator
from kevin_agent.store import RunStore
from kevin_agent.tui.app import KevinApp, create_app

# trajectory 0: compile error, then 2.0x; trajectory 1: 0.8x (slower than eager), then wrong
PLAN = {(0, 0): "broken", (1, 0): "slow", (0, 1): "quick", (1, 1): "wrong"}
RUN_ID = "run-demo"

NO_INPUTS = '''import torch.nn as nn


class Doubler(nn.Module):
    def forward(self, x):
        return x * 2
'''


def make_project(root: Path) -> git.Repo:
    """A repository on main with two modules committed (one lacks example inputs)."""
    root.mkdir(parents=True, exist_ok=True)
    repo = git.Repo.init(root, initial_branch="main")
    with repo.config_writer() as config:
        config.set_value("user", "name", "Test User")
        config.set_value("user", "email", "test@example.com")
        config.set_value("commit", "gpgsign", "false")
    (root / "models").mkdir()
    (root / "models" / "add.py").write_text((FIXTURES / "add_task.py").read_text())
    (root / "models" / "doubler.py").write_text(NO_INPUTS)
    (root / ".gitignore").write_text(".kevin/\n")
    repo.index.add(["models/add.py", "models/doubler.py", ".gitignore"])
    repo.index.commit("initial")
    return repo


def make_app(tmp_path: Path, *, plan=PLAN, delay_s: float = 0.0, name: str = "demo",
             evaluator: Optional[object] = None) -> tuple[KevinApp, Path, Path]:
    """(app, project root, script path): scripted replies + replay verdicts, store under tmp."""
    root = tmp_path / name
    make_project(root)
    script = write_script(tmp_path / "script.json", plan)
    if delay_s:
        import json

        raw = json.loads(script.read_text())
        for response in raw["responses"]:
            response["delay_s"] = delay_s
        script.write_text(json.dumps(raw))
    replay = evaluator or ReplayEvaluator(write_replay(tmp_path / "replay.json"))
    ids = iter([RUN_ID] + [f"{RUN_ID}-{i}" for i in range(2, 50)])
    app = create_app(root, evaluator=replay, store=RunStore(tmp_path / "store" / "runs.sqlite"),
                     run_ids=lambda: next(ids), env={})
    return app, root, script


# A guard only, several times what any wait takes on a busy 2-core machine (seconds): waits end
# when their condition holds, so a slow machine waits longer instead of failing.
GUARD_S = 300.0


async def wait_for(pilot, condition: Callable[[], bool], timeout: float = GUARD_S,
                   what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)
    await settle(pilot)


async def settle(pilot, timeout: float = 5.0) -> None:
    """Wait until two screenshots in a row are equal (tables size their columns lazily)."""
    deadline = time.monotonic() + timeout
    before = pilot.app.export_screenshot()
    while time.monotonic() < deadline:
        await pilot.pause(0.1)
        after = pilot.app.export_screenshot()
        if after == before:
            return
        before = after


async def start_run(pilot, script: Path, *, trajectories: str = "2", turns: str = "2",
                    backend: str = "scripted", endpoint: str = "") -> None:
    """From the browser (cursor on models/add.py): Enter, fill the form, ctrl+s."""
    from textual.widgets import Input, Select

    app = pilot.app
    await wait_for(pilot, lambda: bool(getattr(app.screen, "entries", None)), what="modules")
    await pilot.press("enter")
    await wait_for(pilot, lambda: app.screen.id == "setup", what="setup screen")
    app.screen.query_one("#backend", Select).value = backend
    fields = {"script": str(script), "trajectories": trajectories, "turns": turns}
    if endpoint:
        fields["endpoint"] = endpoint
    for name, value in fields.items():
        app.screen.query_one(f"#{name}", Input).value = value
    await pilot.press("ctrl+s")
    await wait_for(pilot, lambda: app.screen.id == "run", what="run screen")


async def open_past_runs(pilot, status: str) -> None:
    """Wait for the run screen to reach ``status``, go back to the browser, open past runs."""
    app = pilot.app
    await wait_for(pilot, lambda: app.screen.status == status, what=f"run {status}")
    await pilot.press("escape")
    await wait_for(pilot, lambda: app.screen.id == "browser", what="browser")
    await pilot.press("r")
    await wait_for(pilot, lambda: app.screen.id == "runs" and bool(app.screen.run_ids), what="runs")


def shown(app: Any) -> Any:
    """The current screen as its own class (a test reads that screen's fields)."""
    return app.screen


def notifications(app) -> list[str]:
    return [f"{n.title}: {n.message}" for n in app._notifications]

