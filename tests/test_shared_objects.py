"""Our shared binding object: builds of one task that start together compile it once (issue 42).
A stand-in ninja plays the compiles (no nvcc): what is checked is who compiles, waits and copies."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kevin_agent.evaluate.build import shared_objects
from kevin_agent.evaluate.build.ninja_file import NinjaRun, Step
from kevin_agent.evaluate.build.usage import evict_least_recent

KEY = "ab" * 32


def _builds(tmp_path: Path, count: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Path], list[NinjaRun], Path]:
    """``count`` builds of one task's candidates side by side, each with the binding (shared) and its
    own unit; the binding's compile of the first holds on until every build's own unit has begun."""
    monkeypatch.setattr(shared_objects, "write_ninja", lambda *args, **kwargs: None)
    root = tmp_path / "cache"
    binding = Step("bindings.cpp", "bindings.o", "cxx", [], shared_key=KEY)
    own = [Step("host.cpp", "host.o", "cxx")]
    compiled: list[Path] = []
    all_started = threading.Barrier(count + 1)
    lock = threading.Lock()

    def ninja(folder: Path, log: Path, targets: tuple[str, ...]) -> NinjaRun:
        if folder.name.endswith("-shared"):
            with lock:
                compiled.append(folder)
                first = len(compiled) == 1
            if first:
                all_started.wait(timeout=60)  # a guard against a hang, not a limit
            (folder / "bindings.o").write_text("OURS")
        elif targets:  # the build's own unit: begun while the first binding compile is still held
            all_started.wait(timeout=60)
            (folder / "host.o").write_text("own")
        else:
            (folder / "m.so").write_text((folder / "bindings.o").read_text())
        return NinjaRun(True, "")

    runs: list[NinjaRun] = []
    works = []
    for n in range(count):
        work = tmp_path / f"b{n}" / "split"
        work.mkdir(parents=True)
        works.append(work)

    def build(work: Path) -> None:
        runs.append(shared_objects.compile_beside(root, None, [binding], {"bindings.cpp": "// ours\n"},  # type: ignore[arg-type]
                                                  work, own, work / "build.log", ninja))

    threads = [threading.Thread(target=build, args=(w,)) for w in works]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return compiled, runs, root


def test_builds_of_one_task_that_start_together_compile_its_binding_once(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    compiled, runs, root = _builds(tmp_path, 3, monkeypatch)
    assert len(runs) == 3 and all(run.ok for run in runs), runs
    assert len(compiled) == 1  # the other two waited for it and copied the kept object
    assert (root / "objects" / KEY / "object.o").read_text() == "OURS"
    for n in range(3):
        assert (tmp_path / f"b{n}" / "split" / "m.so").read_text() == "OURS"  # each linked the binding


def test_the_lock_files_are_never_evicted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, root = _builds(tmp_path, 1, monkeypatch)
    assert list((root / "objects" / "locks").iterdir())
    evict_least_recent(root, cap_bytes=0, grace_s=0.0)
    assert not (root / "objects" / KEY).exists() and (root / "objects" / "locks").is_dir()
