"""``BuildCache.build`` never leaves its temporary build folder behind (timeout, exception, an
entry another process renamed into place first), and does not cache a failure that came from the
sandbox rather than the candidate's sources. No compiler needed: ``_build_into`` is a stand-in."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from kevin_agent.evaluate.build.cache import BuildCache, BuildResult, entry_dir, read_result
from kevin_agent.evaluate.source.calls import ExtensionSpec

KEY = "ab" * 32
SPEC = ExtensionSpec("m", ("int x;",))  # only its flags are checked: the stand-ins below build nothing


def stand_in_cache(tmp_path: Path, monkeypatch, build_into) -> BuildCache:
    cache = BuildCache(tmp_path / "cache", arch="9.0")
    monkeypatch.setattr(BuildCache, "key", lambda self, spec: KEY)
    monkeypatch.setattr(BuildCache, "_build_into", lambda self, spec, key, tmp: build_into(tmp))
    return cache


def failed(tmp: Path, log: str, **extra) -> BuildResult:
    (tmp / "build.log").write_text(log)
    return BuildResult(ok=False, seconds=0.0, cache_hit=False, log_path=str(tmp / "build.log"),
                       errors=log, path="split", module_path=None, **extra)


def leftovers(cache: BuildCache) -> list[Path]:
    return list((cache.root / "tmp").iterdir())


def test_a_timed_out_build_leaves_no_folder_and_is_not_cached(tmp_path, monkeypatch):
    cache = stand_in_cache(tmp_path, monkeypatch, lambda tmp: failed(tmp, "stopped", timed_out=True))
    result = cache.build(SPEC)
    assert result.timed_out and not result.ok and result.errors == "stopped"
    assert leftovers(cache) == []
    assert not entry_dir(cache.root, KEY).exists()


def test_an_exception_during_the_build_leaves_no_folder(tmp_path, monkeypatch):
    def explode(tmp: Path) -> BuildResult:
        (tmp / "half-written.o").write_bytes(b"\0")
        raise RuntimeError("boom")

    cache = stand_in_cache(tmp_path, monkeypatch, explode)
    with pytest.raises(RuntimeError, match="boom"):
        cache.build(SPEC)
    assert leftovers(cache) == []


def test_an_entry_another_process_renamed_into_place_is_the_result(tmp_path, monkeypatch):
    theirs = failed(tmp_path, "error: theirs")  # written into tmp_path/build.log: any path will do
    theirs.key = KEY

    def race(tmp: Path) -> BuildResult:
        final = entry_dir(tmp_path / "cache", KEY)
        final.mkdir(parents=True)
        (final / "result.json").write_text(json.dumps(asdict(theirs)))  # it finished first
        return failed(tmp, "error: ours")

    cache = stand_in_cache(tmp_path, monkeypatch, race)
    result = cache.build(SPEC)
    assert result.errors == "error: theirs" and result.cache_hit
    assert leftovers(cache) == []


def test_a_broken_entry_in_the_way_is_replaced(tmp_path, monkeypatch):
    def in_the_way(tmp: Path) -> BuildResult:
        final = entry_dir(tmp_path / "cache", KEY)
        final.mkdir(parents=True)
        (final / "junk").write_text("no result.json")
        return failed(tmp, "error: ours")

    cache = stand_in_cache(tmp_path, monkeypatch, in_the_way)
    result = cache.build(SPEC)
    assert result.errors == "error: ours"
    assert getattr(read_result(entry_dir(cache.root, KEY)), "errors", None) == "error: ours"
    assert leftovers(cache) == []


@pytest.mark.parametrize("log", [
    "kevin-sandbox: sandbox required but landlock failed: Invalid argument\n",  # EXIT_UNCONFINED
    "kevin-sandbox: cannot run ninja: No such file or directory\n",
])
def test_a_failure_from_the_sandbox_is_not_cached_as_a_compile_error(tmp_path, monkeypatch, log):
    """The launcher's exit status said so: ``run_confined`` marked the entry's folder."""
    from kevin_agent.evaluate.build.log import SANDBOX_FAILED

    def marked(tmp: Path) -> BuildResult:
        (tmp / SANDBOX_FAILED).touch()
        return failed(tmp, log)

    cache = stand_in_cache(tmp_path, monkeypatch, marked)
    result = cache.build(SPEC)
    assert not result.ok and result.errors == log
    assert not entry_dir(cache.root, KEY).exists()
    assert leftovers(cache) == []


@pytest.mark.parametrize("log", [
    "kevin-sandbox: sandbox required but landlock failed: Invalid argument\n",
    "[1/3] g++ ...\ncc1plus: fatal error: /opt/gcc/include/stdio.h: Permission denied\n",
])
def test_the_sandboxs_words_in_a_log_without_the_mark_are_the_sources_failure(tmp_path, monkeypatch, log):
    """The log carries what the candidate's sources make the compiler print (an ``#error`` can
    say anything): without the launcher's mark it is a compile error like any other, cached."""
    cache = stand_in_cache(tmp_path, monkeypatch, lambda tmp: failed(tmp, log))
    assert not cache.build(SPEC).ok
    assert read_result(entry_dir(cache.root, KEY)) is not None and cache.build(SPEC).cache_hit


def test_a_compile_error_of_the_sources_is_cached(tmp_path, monkeypatch):
    log = "kevin-sandbox: sandbox: landlock abi 7 + seccomp\nmain.cu(3): error: identifier \"x\" is undefined\n"
    cache = stand_in_cache(tmp_path, monkeypatch, lambda tmp: failed(tmp, log))
    result = cache.build(SPEC)
    assert not result.ok
    stored = read_result(entry_dir(cache.root, KEY))
    assert stored is not None and stored.errors == log
    assert stored.log_path and Path(stored.log_path).is_file()
    assert leftovers(cache) == []
    assert cache.build(SPEC).cache_hit


def test_a_listing_that_timed_out_is_listed_again_on_the_next_hit(tmp_path, monkeypatch):
    """A kernel listing that failed for the moment (a loaded host) does not stick to the entry:
    the next hit lists it again and stores the listing once it works; a module's own failure stays."""
    from kevin_agent.evaluate.build import cache as cache_module
    from kevin_agent.evaluate.build.listing import failed_listing

    def built(tmp: Path) -> BuildResult:
        (tmp / "m.so").write_bytes(b"\x7fELF")
        return BuildResult(ok=True, seconds=0.0, cache_hit=False, log_path=None, errors="", path="split",
                           module_path=str(tmp / "m.so"))

    good = {"module_path": "m.so", "kernels": ["k"], "notes": []}
    answers = [lambda p: failed_listing(p, "it did not finish within 60 s"), lambda p: good]
    calls: list[str] = []

    def listing(path: str, sandbox: str = "auto") -> dict:
        calls.append(path)
        return answers[min(len(calls), len(answers)) - 1](path)

    monkeypatch.setattr(cache_module, "kernel_listing", listing)
    cache = stand_in_cache(tmp_path, monkeypatch, built)
    first = cache.build(SPEC)
    assert first.ok and first.kernels and first.kernels["notes"][0].startswith("listing failed: it did not finish")
    second = cache.build(SPEC)
    assert second.cache_hit and second.kernels == good and len(calls) == 2  # listed again, on the entry's module
    assert calls[1] == str(entry_dir(cache.root, KEY) / "m.so")
    third = cache.build(SPEC)
    assert third.kernels == good and len(calls) == 2  # stored: no third listing
    assert sorted(p.name for p in entry_dir(cache.root, KEY).iterdir()) == ["m.so", "result.json"]

    answers[:] = [lambda p: failed_listing(p, "no listing came back (bad json)")]  # the module's own failure
    monkeypatch.setattr(BuildCache, "key", lambda self, spec: "cd" * 32)
    cache.build(SPEC)
    cache.build(SPEC)
    assert len(calls) == 3  # listed once: a failure of the module is cached like a compile error
