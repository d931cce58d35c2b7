"""Mutation audit: apply each deliberate one-line break to the code, run the tests that must catch
it, restore the file, and say whether the break was caught (docs/mutations.md has the table).

    .venv/bin/python scripts/mutation_audit.py            # every break
    .venv/bin/python scripts/mutation_audit.py fill-share lease-finally   # some, by id
    .venv/bin/python scripts/mutation_audit.py --list
    .venv/bin/python scripts/mutation_audit.py --files    # each break against its whole test files

``--files`` runs the whole files its tests live in (without the ``nvcc`` and ``gpu`` tests), not
only the tests named for the break: slower, and what a break meets in an ordinary CPU test run.

First the selected tests run once on the unbroken code (they must pass, or a failure would count
as a catch); then each break is an exact text substitution in place, restored in a ``finally``.
A break whose text is no longer in the file is reported STALE (the code moved: update the break).
Exit code: 0 when every break is caught, 1 when one is not caught or stale, 2 when the tests fail
on the unbroken code or a break's text is found already applied (an earlier run was killed
mid-way: ``git checkout`` the file).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_PYTHON = REPO / ".venv" / "bin" / "python"

PROVENANCE = "tests/test_provenance.py"
SIGNIFICANCE = "tests/test_significance.py"


@dataclass(frozen=True)
class Break:
    id: str
    what: str
    path: str  # relative to the repository
    old: str  # exact text, found exactly once
    new: str
    tests: tuple[str, ...]  # pytest node ids that must fail on the break


BREAKS = (
    Break("fill-share", "strict fill share raised 50% -> 60%", "kevin_agent/evaluate/provenance/policy.py",
          "STRICT_FILL_SHARE = 0.50", "STRICT_FILL_SHARE = 0.60",
          (f"{PROVENANCE}::test_strict_fill_share_boundary_is_one_half",)),
    Break("copy-share", "strict copy share raised 10% -> 12%", "kevin_agent/evaluate/provenance/policy.py",
          "STRICT_COPY_SHARE = 0.10", "STRICT_COPY_SHARE = 0.12",
          (f"{PROVENANCE}::test_strict_copy_share_boundary_is_one_tenth",)),
    Break("fill-floor", "strict fill floor raised 0.1 ms -> 0.2 ms", "kevin_agent/evaluate/provenance/policy.py",
          "STRICT_FILL_FLOOR_MS = 0.1", "STRICT_FILL_FLOOR_MS = 0.2",
          (f"{PROVENANCE}::test_strict_fill_floor_is_a_tenth_of_a_millisecond",)),
    Break("copy-floor", "strict copy floor raised 0.01 ms -> 0.1 ms", "kevin_agent/evaluate/provenance/policy.py",
          "STRICT_COPY_FLOOR_MS = 0.01", "STRICT_COPY_FLOOR_MS = 0.1",
          (f"{PROVENANCE}::test_strict_copy_floor_is_ten_microseconds",)),
    Break("fp64-rms", "float64 gate RMS multiplier 10 -> 100", "kevin_agent/evaluate/worker/correctness.py",
          "FP64_RMS_MULTIPLIER = 10.0", "FP64_RMS_MULTIPLIER = 100.0",
          ("tests/test_correctness_fp64.py::test_fp64_gate_rms_boundary_is_ten_times_eagers_error",)),
    Break("own-prefix-base", "own kernels matched by prefix of the qualified name",
          "kevin_agent/evaluate/provenance/attribution.py",
          "if qualified in self.qualified and",
          "if any(qualified.startswith(q) for q in self.qualified) and",
          (f"{PROVENANCE}::test_a_name_that_only_starts_like_an_own_kernel_is_not_own",)),
    Break("own-prefix-exact", "own kernels matched by prefix of the exact name",
          "kevin_agent/evaluate/provenance/attribution.py",
          "if profiled in self.exact:", "if any(profiled.startswith(e) for e in self.exact):",
          (f"{PROVENANCE}::test_a_name_that_only_starts_like_an_own_kernel_is_not_own",)),
    Break("lease-finally", "a lease not released when the body of hold() raises", "kevin_agent/evaluate/lease.py",
          "        try:\n            yield True\n        finally:\n            self.release()\n",
          "        yield True\n        self.release()\n",
          ("tests/test_lease.py::test_a_lease_is_released_when_the_body_of_hold_raises",)),
    Break("tie-median", "a tie called a win: medians compared instead of the intervals", "kevin_agent/run_table.py",
          "if k_high < b_low and", "if kernel.median_ms < baseline.median_ms and",
          (f"{SIGNIFICANCE}::test_overlapping_intervals_are_a_tie_even_when_the_medians_are_5_percent_apart",)),
    Break("stored-eager", "stored without timings: 1.01x vs eager called a win", "kevin_agent/run_table.py",
          'return "kernel" if eager > 1.0 + MIN_MARGIN else "eager"', 'return "kernel" if eager > 1.0 else "eager"',
          (f"{SIGNIFICANCE}::test_stored_without_timings_a_win_needs_more_than_1_02x",)),
    Break("stored-both", "stored without timings: 1.01x vs both baselines called a win", "kevin_agent/run_table.py",
          "if min(eager, speedup_vs_compile) > 1.0 + MIN_MARGIN:", "if min(eager, speedup_vs_compile) > 1.0:",
          (f"{SIGNIFICANCE}::test_stored_without_timings_a_win_needs_more_than_1_02x",)),
    Break("resume-before-lock", "resume reads the run (and its 'done') before taking the run lock",
          "kevin_agent/runs/service.py",
          "        lock = RunLock.take(store, run_id)\n        try:\n            record = store.load_run(run_id)",
          "        record = store.load_run(run_id)\n        lock = RunLock.take(store, run_id)\n        try:\n"
          "            pass",
          ("tests/test_run_service.py::test_resume_reads_the_run_under_its_lock",)),
    Break("stream-create", "cudaStreamCreate dropped from the extra-stream rule",
          "kevin_agent/evaluate/static/tables.py",
          '    r"\\bcudaStreamCreate\\w*",\n', "",
          ("tests/test_static_checks.py::test_reported[extra-stream: cudaStreamCreate without flags]",)),
    Break("home-toolchain", "a toolchain under $HOME no longer narrowed to its binary folder",
          "kevin_agent/evaluate/sandbox/policy.py",
          'if tree == "/" or any(_contains(tree, g) or _contains(g, tree) for g in guarded):', 'if tree == "/":',
          ("tests/test_sandbox_check_fallbacks.py::test_a_toolchain_under_home_shrinks_to_its_binary_folder",)),
)


def python() -> str:
    return str(VENV_PYTHON) if VENV_PYTHON.exists() else sys.executable


def selection(tests: tuple[str, ...], whole_files: bool) -> list[str]:
    """pytest arguments: the named tests, or their whole files without nvcc and GPU tests."""
    if not whole_files:
        return list(tests)
    return ["-m", "not nvcc and not gpu", *dict.fromkeys(t.split("::")[0] for t in tests)]


def run_tests(args: list[str]) -> tuple[int, float, str]:
    """pytest's exit code, seconds, and the last lines of its output."""
    start = time.monotonic()
    proc = subprocess.run([python(), "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly",
                           *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
    return proc.returncode, time.monotonic() - start, tail


def audit(item: Break, whole_files: bool = False) -> str:
    """CAUGHT, NOT CAUGHT, STALE or ERROR for one break (the file is restored whatever happens)."""
    path = REPO / item.path
    original = path.read_bytes()
    text = original.decode()
    if text.count(item.old) != 1:
        if item.new and item.new in text:
            raise SystemExit(f"{item.path} already holds break {item.id!r} (a killed audit?): git checkout it")
        return "STALE"
    try:
        path.write_text(text.replace(item.old, item.new, 1))
        code, seconds, tail = run_tests(selection(item.tests, whole_files))
    finally:
        path.write_bytes(original)
    if code == 1:
        return f"CAUGHT ({seconds:.0f} s)"
    if code == 0:
        return f"NOT CAUGHT ({seconds:.0f} s)"
    return f"ERROR (pytest exit {code}): {tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", help="break ids to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the breaks and their tests")
    parser.add_argument("--files", action="store_true", help="run each break's whole test files (no nvcc/gpu)")
    args = parser.parse_args(argv)
    unknown = set(args.ids) - {b.id for b in BREAKS}
    if unknown:
        parser.error(f"unknown break id(s): {', '.join(sorted(unknown))} (see --list)")
    chosen = [b for b in BREAKS if not args.ids or b.id in args.ids]
    if args.list:
        for item in chosen:
            print(f"{item.id:20} {item.what}\n{'':20} {item.path} -> {', '.join(item.tests)}")
        return 0
    tests = tuple(dict.fromkeys(t for b in chosen for t in b.tests))
    code, seconds, tail = run_tests(selection(tests, args.files))
    if code != 0:
        print(f"the tests fail on the unbroken code (pytest exit {code}); fix that first:\n{tail}")
        return 2
    print(f"unbroken: {' '.join(selection(tests, args.files))} pass ({seconds:.0f} s)" if args.files
          else f"unbroken: {len(tests)} test(s) pass ({seconds:.0f} s)")
    results = [(item, audit(item, args.files)) for item in chosen]
    for item, outcome in results:
        print(f"{item.id:20} {outcome:16} {item.what}")
    caught = sum(outcome.startswith("CAUGHT") for _, outcome in results)
    print(f"{caught} of {len(results)} breaks caught")
    return 0 if caught == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
