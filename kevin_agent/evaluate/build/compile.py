"""Compile whole candidates: find their load_inline calls, build each, batch in parallel.

Also the GPU worker's hook that makes the candidate's own load_inline call return the module
built (or found) in the cache under exactly the key ``compile_candidate`` used.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from kevin_agent import feedback
from kevin_agent.evaluate.build.specs import SourceExtractionError, extract_specs
from kevin_agent.evaluate.source.calls import load_inline_parameter_order, spec_from_call

# Extensions one answer may build: real answers have one or two; each build may take minutes
# (up to the compile limit) and leaves a cache entry, so a loop of load_inline calls with distinct
# sources would otherwise hold the machine and fill the disk.
MAX_EXTENSIONS = 8

if TYPE_CHECKING:
    import types

    from kevin_agent.evaluate.build.cache import BuildCache, BuildResult


@dataclass
class CompileOutcome:
    ok: bool
    message: str  # feedback.compile_error text when not ok
    results: list[BuildResult] = field(default_factory=list)
    found_by: str = ""  # "static" or "child": how the load_inline arguments were found

    @property
    def errors(self) -> str | None:
        failed = [r.errors for r in self.results if not r.ok and r.errors]
        return "\n".join(failed) if failed else None


def compile_candidate(code: str, cache: BuildCache) -> CompileOutcome:
    """Build every load_inline call of ``code``; a bad candidate is an outcome, not an exception."""
    try:
        specs, found_by = extract_specs(code, timeout_s=min(120.0, cache.timeout_s), sandbox=cache.sandbox)
    except SourceExtractionError as exc:
        return CompileOutcome(False, feedback.compile_error(f"could not find what to compile: {exc}"))
    distinct = len({repr(spec.to_dict()) for spec in specs})
    if distinct > MAX_EXTENSIONS:
        return CompileOutcome(False, feedback.compile_error(
            f"the answer builds {distinct} different extensions (load_inline calls); at most {MAX_EXTENSIONS} "
            "are built per answer: put the kernels into one load_inline call"), [], found_by)
    results = []
    for spec in specs:
        result = cache.build(spec)
        results.append(result)
        if not result.ok:
            return CompileOutcome(False, feedback.compile_error(result.errors or "build failed"), results, found_by)
    return CompileOutcome(True, feedback.compiled_only(), results, found_by)


def compile_many(codes: Sequence[str], cache: BuildCache, jobs: int | None = None) -> list[CompileOutcome]:
    """Compile a batch in parallel across the CPU cores; outcomes in the order of ``codes``."""
    if not codes:
        return []
    cpus = os.cpu_count() or 2
    workers = jobs or max(1, min(len(codes), cpus // 2))
    cache.toolchain  # noqa: B018 - resolve once (EnvironmentProblem here, not in a worker thread)
    saved = cache.ninja_jobs
    cache.ninja_jobs = max(2, cpus // workers)
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda code: compile_candidate(code, cache), codes))
    finally:
        cache.ninja_jobs = saved


def install_load_inline_hook(cache: BuildCache,
                             on_result: Optional[Callable[[BuildResult], None]] = None) -> None:
    """Make torch.utils.cpp_extension.load_inline return the cached module (building if missing).

    Call before the candidate module executes, so ``from torch.utils.cpp_extension import
    load_inline`` in the candidate picks up the hook too. ``on_result`` hears the build result of
    every extension the candidate loads (provenance: their kernels are the candidate's own).
    """
    from torch.utils import cpp_extension

    order = load_inline_parameter_order()  # read torch's signature before it is replaced

    def cached_load_inline(*args: Any, **kwargs: Any) -> types.ModuleType:
        return cache.load(spec_from_call(args, kwargs, order), on_result)

    cached_load_inline.__kevin_hook__ = True  # type: ignore[attr-defined]  # a marker on the hook
    cpp_extension.load_inline = cached_load_inline
