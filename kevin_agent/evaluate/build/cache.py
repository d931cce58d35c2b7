"""Compile load_inline extensions into a content-addressed cache, fast.

``BuildCache.build(spec)`` keys the build over sources, functions, flags, torch/CUDA/nvcc
versions, arch list and our recipe version; a hit is a directory lookup. A miss tries the split
fast path (kernels through nvcc without torch headers, torch host code through g++ with a shared
precompiled header) and falls back to load_inline's whole layout. Builds happen in a temporary
directory renamed into place under a file lock, so concurrent processes never corrupt an entry.

A candidate's flags and paths are checked against ``source.flags`` first (refused: no compiler
runs). Each compile is confined to its own sub-folder (``split/``, ``whole/``); the parent alone
writes the entry's folder: the log (from the compiler's pipe), the module (copied out of the
sub-folder without following links) and ``result.json``; the sub-folders are removed before the
entry is renamed into place, so an entry holds nothing a compile wrote but its module. The
kernels in the module are listed in a confined child too (``build.listing``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import stat
import sys
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Optional

from kevin_agent.eval_modes import SandboxMode
from kevin_agent.evaluate.build import shared_objects
from kevin_agent.evaluate.build.chunks import SplitRefused
from kevin_agent.evaluate.build.facts import build_facts
from kevin_agent.evaluate.build.flags import Toolchain, pch_flags, toolchain
from kevin_agent.evaluate.build.layout import BindingRefused, Headers, Layout, split_layout, whole_layout
from kevin_agent.evaluate.build.listing import failed_for_now, kernel_listing
from kevin_agent.evaluate.build.log import SANDBOX_FAILED, errors_only_in, trim_errors
from kevin_agent.evaluate.build.ninja_file import (
    BINDING_PCH_TEXT,
    BINDING_SHIM_TEXT,
    PCH_TEXT,
    PCH_TEXT_NO_PYTHON,
    PCH_TEXT_NO_PYTHON_FULL,
    SHIM_TEXT,
    SHIM_TEXT_FULL,
    Confine,
    NinjaRun,
    append_log,
    ensure_pch,
    file_lock,
    header_shim,
    run_ninja,
    write_ninja,
)
from kevin_agent.evaluate.build.split import SOURCE_NAME
from kevin_agent.evaluate.provenance.origins import line_directives
from kevin_agent.evaluate.sandbox.limits import limit_message
from kevin_agent.evaluate.source.calls import ExtensionSpec
from kevin_agent.evaluate.source.consts import MAX_VALUE
from kevin_agent.evaluate.source.flags import argument_problems

__all__ = ["ExtensionSpec", "BuildResult", "BuildCache", "default_cache_root", "import_extension"]


ENTRY_FOLDER = "ext"  # <cache root>/ext/<key>: one built extension (its files and result.json)
MODULE_FOLDER = "lib"  # <entry>/lib/<module>.so: the parent's copy of the built module
MAX_MODULE_BYTES = 256 * 1024 * 1024


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
    # what the parent read from the candidate's own objects and preprocessed translation units
    # (provenance.facts: own kernels by origin, imports, host assembly); policy-independent
    facts: Optional[dict[str, Any]] = None


class BuildCache:
    """Content-addressed build cache; safe to share between processes."""

    def __init__(self, root: Path | None = None, arch: str | None = None, timeout_s: float | None = None,
                 ninja_jobs: int | None = None, split: bool = True) -> None:
        from kevin_agent.evaluate.api import compile_timeout_default

        self.root = Path(root) if root is not None else default_cache_root()
        self.arch = arch
        self.timeout_s = timeout_s if timeout_s is not None else compile_timeout_default()
        self.ninja_jobs = ninja_jobs or max(2, os.cpu_count() or 2)
        self.split = split  # False forces the whole path (benchmarks, comparisons)
        self.sandbox: SandboxMode = "auto"  # confine compilers and the load_inline recorder: auto | required | off
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

    def _confinement(self, build_dir: Path) -> Confine | None:
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
        self._headers(())

    def build(self, spec: ExtensionSpec) -> BuildResult:
        """Build (or find) the extension; failures are results, never exceptions. A spec with a
        flag or path off the allow-list, or sources over MAX_VALUE characters, is refused (not cached)."""
        start = time.monotonic()
        refused = refusal(spec)
        if refused is not None:
            return BuildResult(False, time.monotonic() - start, False, None, refused, "refused", None)
        key = self.key(spec)
        final = entry_dir(self.root, key)
        hit = _read_entry(final, start)
        if hit is not None and not _listed_later(hit):
            return hit
        with file_lock(self.root / "locks" / f"{key}.lock"):
            hit = _read_entry(final, start)
            if hit is not None:
                return self._list_again(hit, final) if _listed_later(hit) else hit
            tmp = Path(tempfile.mkdtemp(prefix=f"{key[:16]}-", dir=_mkdir(self.root / "tmp")))
            try:
                return self._build_and_store(spec, key, tmp, final, start)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)  # gone after a rename; else never left behind

    def _list_again(self, hit: BuildResult, final: Path) -> BuildResult:
        """``hit`` with its kernels listed again (its stored listing failed for the moment: a
        timeout on a loaded host); the entry's result is replaced when this listing worked."""
        assert hit.module_path is not None
        hit.kernels = kernel_listing(hit.module_path, self.sandbox)
        stored = read_result(final)
        if stored is not None and not failed_for_now(hit.kernels):
            stored.kernels = hit.kernels
            fresh = final / f"result.json.{os.getpid()}.new"
            fresh.unlink(missing_ok=True)  # left by an interrupted earlier attempt
            write_new(fresh, json.dumps(asdict(stored)))
            os.replace(fresh, final / "result.json")  # the parent makes and owns every entry
        return hit

    def _build_and_store(self, spec: ExtensionSpec, key: str, tmp: Path, final: Path, start: float) -> BuildResult:
        """Build in ``tmp``, then rename it to ``final`` (the entry) unless the failure is not the
        sources' (a timeout, the sandbox): that result is returned uncached, its folder removed."""
        result = self._build_into(spec, key, tmp)
        if result.ok and result.module_path:
            result.kernels = kernel_listing(result.module_path, self.sandbox)  # in a confined child
        result.seconds = time.monotonic() - start
        if result.timed_out or not result.ok and self._sandbox_failed(result):
            result.key, result.log_path = key, None  # its folder is removed: errors carry the log
            return result  # not a property of the sources: do not cache it
        final_result = rehome(result, str(tmp), final)
        final_result.key = key
        write_new(tmp / "result.json", json.dumps(asdict(final_result)))
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
        """The build failed because of the sandbox, not the sources: the launcher's exit status
        said so (it could not confine, run the compiler, or a bound stopped it; ``run_confined``
        marks the entry's folder), never words of the log, which the candidate's sources shape."""
        if self.sandbox == "off" or not result.log_path:
            return False
        return (Path(result.log_path).parent / SANDBOX_FAILED).exists()

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
        headers, pch_seconds = self._headers(spec.extra_cflags)
        note = "split disabled"
        if self.split:
            try:
                layout = split_layout(spec, module, tc, headers)
                result = self._run(layout, module, tmp, log_path, spec.extra_ldflags)
                result.pch_seconds = pch_seconds
                log = log_path.read_text(errors="replace")
                if result.ok or errors_only_in(log, (SOURCE_NAME,)) and _nvcc_only(log_path):
                    return result
                note = "split build failed outside the kernels; retried whole"
            except SplitRefused as exc:
                note = str(exc)
            except BindingRefused as exc:
                return _binding_refused(str(exc), log_path)
            append_log(log_path, f"\n=== whole path ({note}) ===\n")
        headers, more_pch_seconds = self._headers(spec.extra_cflags, all_of_torch=True)
        pch_seconds += more_pch_seconds
        try:
            layout = whole_layout(spec, module, tc, headers, note)
        except BindingRefused as exc:
            return _binding_refused(str(exc), log_path)
        result = self._run(layout, module, tmp, log_path, spec.extra_ldflags)
        result.pch_seconds, result.split_note = pch_seconds, note
        return result

    def _headers(self, extra_cflags: tuple[str, ...], all_of_torch: bool = False) -> tuple[Headers, float]:
        """The shared headers of a build with ``extra_cflags`` (each built once), and the seconds
        spent building them now. The candidate's units see torch/types.h, or all of torch's C++
        API with ``all_of_torch`` (the whole path)."""
        tc = self.toolchain
        flags = tc.cxx_flags(pch_flags(extra_cflags))
        if all_of_torch:
            binding_text, own_text, shim_text = PCH_TEXT, PCH_TEXT_NO_PYTHON_FULL, SHIM_TEXT_FULL
        else:
            binding_text, own_text, shim_text = BINDING_PCH_TEXT, PCH_TEXT_NO_PYTHON, SHIM_TEXT
        bindings = ensure_pch(self.root, tc, flags, confine_for=self._confinement, header_text=binding_text)
        own = ensure_pch(self.root, tc, flags, confine_for=self._confinement, header_text=own_text)
        binding_shim = None if all_of_torch else header_shim(self.root, BINDING_SHIM_TEXT)
        headers = Headers(bindings.header, own.header, header_shim(self.root, shim_text), binding_shim)
        return headers, bindings.seconds + own.seconds

    def _run(self, layout: Layout, module: str, directory: Path, log_path: Path,
             extra_ldflags: tuple[str, ...] = ()) -> BuildResult:
        """Compile ``layout`` confined to its own new sub-folder of ``directory``; the module comes
        out as the parent's copy (``take_module``), the sub-folder is removed."""
        work = directory / layout.path
        work.mkdir()  # new: no earlier compile can have made it (they write only their own folder)
        for name, content in layout.files.items():
            write_new(work / name, content)
        steps = shared_objects.reuse(self.root, layout.steps, work)
        apart = [step for step in steps if step.shared_key]  # ours, not kept yet: compiled apart
        steps = [step for step in steps if not step.shared_key]
        prebuilt = tuple(step.output for step in layout.steps if step not in steps)
        target = f"{module}.so"
        write_ninja(work, self.toolchain, steps, target, self.toolchain.ldflags(tuple(extra_ldflags)), prebuilt)

        def ninja(folder: Path, log: Path, targets: tuple[str, ...] = ()) -> NinjaRun:
            return run_ninja(folder, self.ninja_jobs, self.timeout_s, log, self._confinement(folder), targets)

        if apart:
            ran = shared_objects.compile_beside(self.root, self.toolchain, apart, layout.files, work, steps,
                                                log_path, ninja)
        else:
            ran = ninja(work, log_path)
        module_path, errors = None, None if ran.ok else limit_message(ran.output) or trim_errors(ran.output)
        facts = None
        if ran.ok:
            module_path, problem = take_module(work / target, directory / MODULE_FOLDER)
            errors = problem
            facts = build_facts(work, layout.own_objects, layout.preprocessed, self.sandbox)
        shutil.rmtree(work, ignore_errors=True)
        return BuildResult(
            ok=module_path is not None, seconds=0.0, cache_hit=False, log_path=str(log_path),
            errors=errors, path=layout.path, module_path=module_path, split_note=layout.note,
            timed_out=ran.timed_out, facts=facts,
        )


def refusal(spec: ExtensionSpec) -> str | None:
    """Why ``spec`` must not reach a compiler (its flags, paths or size), else None."""
    problems = [message for _, message in argument_problems(spec.to_dict())]
    size = sum(len(text) for text in (*spec.cpp_sources, *spec.cuda_sources))
    if size > MAX_VALUE:
        problems.append(f"the sources are {size:,} characters; the limit is {MAX_VALUE:,}")
    else:
        problems += _line_directive_problems(spec)
    return "\n".join(problems) if problems else None


def _line_directive_problems(spec: ExtensionSpec) -> list[str]:
    """``#line`` and line-marker directives would hide where code comes from (``provenance.origins``)."""
    problems = []
    for name, texts in (("cuda_sources", spec.cuda_sources), ("cpp_sources", spec.cpp_sources)):
        lines = line_directives("\n".join(texts))
        if lines:
            problems.append(f"{name} line {lines[0]}: line directives (#line, # N \"file\") are not allowed: the "
                            "evaluator reads where each piece of code comes from; remove them")
    return problems


def _binding_refused(message: str, log_path: Path) -> BuildResult:
    """The failed build of a spec whose ``functions`` cannot be bound (nothing was compiled)."""
    append_log(log_path, f"error: {message}\n")
    return BuildResult(False, 0.0, False, str(log_path), f"error: {message}", "refused", None)


def write_new(path: Path, content: str) -> None:
    """Create ``path`` (never an existing file, never through a link) and write ``content``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with open(fd, "w", encoding="utf-8") as handle:
        handle.write(content)


def take_module(built: Path, folder: Path) -> tuple[str | None, str | None]:
    """(the parent's copy of the module a compile built, None) or (None, why not): a regular file
    under MAX_MODULE_BYTES, opened without following a link and copied into ``folder``."""
    try:
        fd = os.open(built, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return None, f"the build made no usable module: {exc.strerror}"
    with open(fd, "rb") as source:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_MODULE_BYTES:
            return None, f"the build made no usable module (not a regular file under {MAX_MODULE_BYTES:,} bytes)"
        folder.mkdir(exist_ok=True)
        copy = folder / built.name
        out = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o755)
        with open(out, "wb") as target:
            left = MAX_MODULE_BYTES
            while left > 0 and (chunk := source.read(min(left, 1024 * 1024))):
                target.write(chunk)
                left -= len(chunk)
    return str(copy), None


def _nvcc_only(log_path: Path) -> bool:
    text = log_path.read_text(errors="replace")
    failed = [line for line in text.splitlines() if line.startswith("FAILED: ")]
    return bool(failed) and all(line.strip().endswith(("kernels.o", "kernels.ii")) for line in failed)


def read_result(final: Path) -> BuildResult | None:
    """The stored result of the entry at ``final`` (older entries' missing fields defaulted)."""
    try:
        raw = json.loads((final / "result.json").read_text())
    except (OSError, ValueError):
        return None
    known = {f.name for f in fields(BuildResult)}
    return BuildResult(**{k: v for k, v in raw.items() if k in known})


def _listed_later(result: BuildResult) -> bool:
    """A built module whose kernel listing failed for a reason not its own: list it again."""
    return result.ok and result.module_path is not None and failed_for_now(result.kernels)


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
