"""Compile load_inline extensions into a content-addressed cache, fast.

``BuildCache.build(spec)`` keys the build over sources, functions, flags, torch/CUDA/nvcc
versions, arch list and our recipe version; a hit is a directory lookup. A miss tries the split
fast path (kernels through nvcc without torch headers, torch host code through g++ with a shared
precompiled header) and falls back to load_inline's whole layout. Builds happen in a temporary
directory renamed into place under a file lock, so concurrent processes never corrupt an entry.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Optional

from kevin_agent.evaluate.build.chunks import SplitRefused
from kevin_agent.evaluate.build.flags import Toolchain, toolchain
from kevin_agent.evaluate.build.layout import Layout, split_layout, whole_layout
from kevin_agent.evaluate.build.log import errors_only_in, trim_errors
from kevin_agent.evaluate.build.ninja_file import ensure_pch, file_lock, run_ninja, write_ninja
from kevin_agent.evaluate.build.split import SOURCE_NAME
from kevin_agent.evaluate.source.calls import ExtensionSpec

__all__ = ["ExtensionSpec", "BuildResult", "BuildCache", "default_cache_root", "import_extension"]


ENTRY_FOLDER = "ext"  # <cache root>/ext/<key>: one built extension (its files and result.json)
# A confined build's log when the sandbox, not the sources, made it fail: the launcher's own lines
# ("kevin-sandbox: sandbox required but ...", "kevin-sandbox: cannot run ninja: ..."; not the
# verbose "kevin-sandbox: sandbox: landlock ..."), and refusals of Landlock (EACCES) and seccomp (EPERM)
LAUNCHER_PREFIX = "kevin-sandbox: "
SANDBOX_REFUSALS = ("Permission denied", "Operation not permitted")


def entry_dir(root: Path, key: str) -> Path:
    """Where the entry of ``key`` lives under the cache ``root``."""
    return Path(root) / ENTRY_FOLDER / key


def rehome(result: BuildResult, old_root: str, new_root: Path) -> BuildResult:
    """A copy of ``result`` whose paths under ``old_root`` now point under ``new_root`` (an entry
    renamed into place, or unpacked on another machine)."""
    def moved(value: str | None) -> str | None:
        return str(new_root) + value[len(old_root):] if value and value.startswith(old_root) else value

    copy = BuildResult(**asdict(result))
    copy.log_path, copy.module_path = moved(copy.log_path), moved(copy.module_path)
    if copy.kernels and copy.kernels.get("path"):
        copy.kernels = {**copy.kernels, "path": moved(str(copy.kernels["path"]))}
    return copy


def default_cache_root() -> Path:
    return Path(os.environ.get("KEVIN_BUILD_CACHE") or Path.home() / ".cache" / "kevin-agent" / "build")


@dataclass
class BuildResult:
    ok: bool
    seconds: float
    cache_hit: bool
    log_path: str | None
    errors: str | None  # trimmed: first errors with file:line, for the model
    path: str  # "split" (fast path) or "whole" (fallback)
    module_path: str | None  # the built .so
    pch_seconds: float = 0.0  # one-time precompiled-header cost paid by this build
    split_note: str = ""  # why the split path was not used, when it was not
    key: str = ""
    timed_out: bool = False  # stopped at the time limit: not a property of the sources, not cached
    # the kernels built into the .so (provenance.symbols.ExtensionKernels.to_dict()); None in cache
    # entries written before provenance existed (the worker lists the .so itself then, ~50 ms)
    kernels: Optional[dict[str, Any]] = None


class BuildCache:
    """Content-addressed build cache; safe to share between processes."""

    def __init__(self, root: Path | None = None, arch: str | None = None, timeout_s: float = 300.0,
                 ninja_jobs: int | None = None, split: bool = True) -> None:
        self.root = Path(root) if root is not None else default_cache_root()
        self.arch = arch
        self.timeout_s = timeout_s
        self.ninja_jobs = ninja_jobs or max(2, os.cpu_count() or 2)
        self.split = split  # False forces the whole path (benchmarks, comparisons)
        self.sandbox = "auto"  # confine compilers and the load_inline recorder: auto | required | off
        self._toolchain: Toolchain | None = None

    @property
    def toolchain(self) -> Toolchain:
        """Resolved on first use; raises EnvironmentProblem (one line) without nvcc or an arch."""
        if self._toolchain is None:
            self._toolchain = toolchain(self.arch)
        return self._toolchain

    def key(self, spec: ExtensionSpec) -> str:
        payload = {k: v for k, v in spec.to_dict().items() if k != "name"}  # the name is not built in
        payload["toolchain"] = self.toolchain.fingerprint()
        payload["split"] = self.split
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    def _confinement(self, build_dir: Path) -> Callable[[list[str]], list[str]] | None:
        """Compilers read model-written sources: they may write only ``build_dir`` and read the
        toolchain, torch's headers and the shared precompiled header (``sandbox.compile_policy``)."""
        if self.sandbox == "off":
            return None
        from kevin_agent.evaluate.sandbox import compile_policy, launch_command
        from kevin_agent.paths import protected_paths

        policy = compile_policy(build_dir, extra_read=[self.root / "pch"], protect=protected_paths())
        return lambda argv: launch_command(policy, argv, self.sandbox)

    def warm(self) -> None:
        """Build the shared precompiled torch header now (most builds use it), if it is missing."""
        tc = self.toolchain
        ensure_pch(self.root, tc, tc.cxx_flags(()))

    def build(self, spec: ExtensionSpec) -> BuildResult:
        """Build (or find) the extension; failures are results, never exceptions."""
        start = time.monotonic()
        key = self.key(spec)
        final = entry_dir(self.root, key)
        hit = _read_entry(final, start)
        if hit is not None:
            return hit
        with file_lock(self.root / "locks" / f"{key}.lock"):
            hit = _read_entry(final, start)
            if hit is not None:
                return hit
            tmp = Path(tempfile.mkdtemp(prefix=f"{key[:16]}-", dir=_mkdir(self.root / "tmp")))
            try:
                return self._build_and_store(spec, key, tmp, final, start)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)  # gone after a rename; else never left behind

    def _build_and_store(self, spec: ExtensionSpec, key: str, tmp: Path, final: Path, start: float) -> BuildResult:
        """Build in ``tmp``, then rename it to ``final`` (the entry) unless the failure is not the
        sources' (a timeout, the sandbox): that result is returned uncached, its folder removed."""
        result = self._build_into(spec, key, tmp)
        if result.ok and result.module_path:
            result.kernels = kernel_listing(result.module_path)
        result.seconds = time.monotonic() - start
        if result.timed_out or not result.ok and self._sandbox_failed(result):
            result.key, result.log_path = key, None  # its folder is removed: errors carry the log
            return result  # not a property of the sources: do not cache it
        final_result = rehome(result, str(tmp), final)
        final_result.key = key
        (tmp / "result.json").write_text(json.dumps(asdict(final_result)))
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(tmp, final)
        except OSError:  # ``final`` exists (ENOTEMPTY): another process built it, or a broken entry
            existing = _read_entry(final, start)
            if existing is not None:
                return existing
            shutil.rmtree(final, ignore_errors=True)
            os.rename(tmp, final)
        return final_result

    def _sandbox_failed(self, result: BuildResult) -> bool:
        """The build failed because of the sandbox, not the sources: the confined launcher could
        not confine (``EXIT_UNCONFINED``) or run the compiler, or the log shows a refusal."""
        if self.sandbox == "off" or not result.log_path:
            return False
        text = Path(result.log_path).read_text(errors="replace")
        return any(line.startswith(LAUNCHER_PREFIX) and not line.startswith(LAUNCHER_PREFIX + "sandbox: ")
                   or any(refusal in line for refusal in SANDBOX_REFUSALS) for line in text.splitlines())

    def load(self, spec: ExtensionSpec, on_result: Optional[Callable[[BuildResult], None]] = None
             ) -> types.ModuleType:
        """Build if needed and import the extension (RuntimeError with the compiler errors if it fails).

        ``on_result`` hears the build result first (the worker records which extensions a
        candidate loaded: their kernels are the candidate's own)."""
        result = self.build(spec)
        if on_result is not None:
            on_result(result)
        if not result.ok or not result.module_path:
            raise RuntimeError(f"Error building extension '{spec.name}':\n{result.errors}")
        return import_extension(result.module_path)

    def _build_into(self, spec: ExtensionSpec, key: str, tmp: Path) -> BuildResult:
        module = f"kevin_{key[:16]}"
        tc = self.toolchain
        log_path = tmp / "build.log"
        pch = ensure_pch(self.root, tc, tc.cxx_flags(spec.extra_cflags))
        note = "split disabled"
        if self.split:
            try:
                layout = split_layout(spec, module, tc, pch.header)
                result = self._run(layout, module, tmp, log_path, spec.extra_ldflags)
                result.pch_seconds = pch.seconds
                log_text = log_path.read_text(errors="replace")
                if result.ok or errors_only_in(log_text, (SOURCE_NAME,)) and _nvcc_only(log_path):
                    return result
                note = "split build failed outside the kernels; retried whole"
            except SplitRefused as exc:
                note = str(exc)
            with open(log_path, "a") as log:
                log.write(f"\n=== whole path ({note}) ===\n")
        result = self._run(whole_layout(spec, module, tc, pch.header, note), module, tmp, log_path, spec.extra_ldflags)
        result.pch_seconds, result.split_note = pch.seconds, note
        return result

    def _run(self, layout: Layout, module: str, directory: Path, log_path: Path,
             extra_ldflags: tuple[str, ...] = ()) -> BuildResult:
        work = directory / layout.path
        work.mkdir(exist_ok=True)
        for name, content in layout.files.items():
            (work / name).write_text(content)
        target = f"{module}.so"
        write_ninja(work, self.toolchain, layout.steps, target, self.toolchain.ldflags(tuple(extra_ldflags)))
        ran = run_ninja(work, self.ninja_jobs, self.timeout_s, log_path, self._confinement(directory))
        return BuildResult(
            ok=ran.ok, seconds=0.0, cache_hit=False, log_path=str(log_path),
            errors=None if ran.ok else trim_errors(ran.output), path=layout.path,
            module_path=str(work / target) if ran.ok else None, split_note=layout.note,
            timed_out=ran.timed_out,
        )


def _nvcc_only(log_path: Path) -> bool:
    text = log_path.read_text(errors="replace")
    failed = [ln for ln in text.splitlines() if ln.startswith("FAILED: ")]
    return bool(failed) and all(ln.strip().endswith("kernels.o") for ln in failed)


def kernel_listing(module_path: str) -> dict[str, Any]:
    """The kernels built into ``module_path`` (what provenance calls the candidate's own)."""
    from kevin_agent.evaluate.provenance.symbols import list_kernels

    return list_kernels(module_path).to_dict()


def read_result(final: Path) -> BuildResult | None:
    """The stored result of the entry at ``final`` (older entries' missing fields defaulted)."""
    try:
        raw = json.loads((final / "result.json").read_text())
    except (OSError, ValueError):
        return None
    known = {f.name for f in fields(BuildResult)}
    return BuildResult(**{k: v for k, v in raw.items() if k in known})


def _read_entry(final: Path, start: float) -> BuildResult | None:
    result = read_result(final)
    if result is not None:
        result.cache_hit, result.seconds, result.pch_seconds = True, time.monotonic() - start, 0.0
    return result


def import_extension(module_path: str) -> types.ModuleType:
    """Import a built extension .so (once per process)."""
    name = Path(module_path).stem
    if name in sys.modules:
        return sys.modules[name]
    import torch  # noqa: F401 - the extension links against torch's libraries

    spec = importlib.util.spec_from_file_location(name, module_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {module_path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
