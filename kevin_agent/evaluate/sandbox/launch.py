"""Start a program or a Python module already confined.

``python -m kevin_agent.evaluate.sandbox.launch --mode auto --policy JSON -m MODULE [ARGS]``
confines this fresh, single-threaded interpreter (so the rules bind every thread torch starts
later) and runs MODULE as ``__main__``; ``... --policy JSON -- PROGRAM [ARGS]`` confines, then
executes PROGRAM (the rules survive execve). In ``required`` mode a failure exits with status
``EXIT_UNCONFINED`` and one line on stderr, before any of the target runs. The report of the
layer is then ``sandbox.current_report()`` inside MODULE.

A policy with bounds (``SandboxPolicy.relayed``) makes the target the first process of a new
PID namespace (``namespaces``): the launcher stays outside, relays the target's output within
the bounds, watches its scratch folder, and exits as the target did, or with ``EXIT_LIMIT``
and a ``kevin-sandbox: limit: ...`` line when a bound stopped it (``relay``).
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
from collections.abc import Sequence
from typing import Optional

from kevin_agent.eval_modes import SandboxMode, parse_sandbox_mode
from kevin_agent.evaluate.sandbox.enforce import MODES, SandboxUnavailable, confine, set_isolation
from kevin_agent.evaluate.sandbox.namespaces import Isolation, become_init, unshare_namespaces
from kevin_agent.evaluate.sandbox.policy import SandboxPolicy
from kevin_agent.evaluate.sandbox.relay import Caps, relay

EXIT_UNCONFINED = 70


def launch_command(policy: SandboxPolicy, argv: Sequence[str], mode: SandboxMode = "auto", *,
                   python: Optional[str] = None, module: bool = False) -> list[str]:
    """The command line that confines to ``policy`` then runs ``argv``: a module name and its
    arguments when ``module`` (run with this interpreter), else a program and its arguments."""
    head = [python or sys.executable, "-m", "kevin_agent.evaluate.sandbox.launch", "--mode", mode,
            "--policy", policy.to_json()]
    return head + (["-m", *argv] if module else ["--", *argv])


def _split(argv: Sequence[str]) -> tuple[list[str], Optional[str], list[str]]:
    """(launcher options, module or None, the target's arguments): everything after ``-m MODULE``
    or ``--`` belongs to the target, untouched."""
    for i, arg in enumerate(argv):
        if arg == "--":
            return list(argv[:i]), None, list(argv[i + 1:])
        if arg == "-m" and i + 1 < len(argv):
            return list(argv[:i]), argv[i + 1], list(argv[i + 2:])
    return list(argv), None, []


def main(argv: Optional[Sequence[str]] = None) -> int:
    options, module, rest = _split(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="kevin_agent.evaluate.sandbox.launch",
                                     usage="%(prog)s [--mode MODE] --policy JSON (-m MODULE | -- PROGRAM) [ARGS]")
    parser.add_argument("--mode", choices=MODES, default="auto")
    parser.add_argument("--policy", required=True, help="SandboxPolicy as JSON")
    args = parser.parse_args(options)
    if not module and not rest:
        parser.error("give -m MODULE or -- PROGRAM")
    policy, mode = SandboxPolicy.from_json(args.policy), parse_sandbox_mode(args.mode)  # choices= checked it
    if mode != "off" and policy.relayed:
        return _isolated(policy, mode, module, rest)
    return _confined(policy, mode, module, rest)


def _isolated(policy: SandboxPolicy, mode: SandboxMode, module: Optional[str], rest: list[str]) -> int:
    """Fork the target as the first process of a new PID namespace; relay its output within
    the policy's bounds and end with it (``relay``)."""
    why = unshare_namespaces()
    if why and mode == "required":
        print(f"kevin-sandbox: sandbox required but {why}", file=sys.stderr, flush=True)
        return EXIT_UNCONFINED
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        iso = (become_init(policy.max_processes, parent, policy.hidden, policy.granted()) if not why
               else Isolation(problems=(why,)))
        set_isolation(iso.summary())
        os._exit(_child_exit(policy, mode, module, rest))
    os.close(out_w)
    os.close(err_w)
    caps = Caps(policy.max_output_bytes, policy.max_scratch_bytes, [policy.tmpdir] if policy.tmpdir else [],
                policy.label)
    code = relay(child, [(out_r, 1), (err_r, 2)], caps)
    os._exit(code)  # nothing of the launcher's interpreter is left to clean up: skip its finalisation


def _child_exit(policy: SandboxPolicy, mode: SandboxMode, module: Optional[str], rest: list[str]) -> int:
    """Run the target in the forked child; its exit code (never returns into the launcher's code)."""
    try:
        code: object = _confined(policy, mode, module, rest)
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr, flush=True)
    return 1


def _confined(policy: SandboxPolicy, mode: SandboxMode, module: Optional[str], rest: list[str]) -> int:
    """Confine this process, then run the module (in this interpreter) or execute the program."""
    try:
        report = confine(policy, mode)
    except SandboxUnavailable as exc:
        print(f"kevin-sandbox: {exc}", file=sys.stderr, flush=True)
        return EXIT_UNCONFINED
    if os.environ.get("KEVIN_SANDBOX_VERBOSE"):
        extra = f"; {report.isolation}" if report.isolation else ""
        print(f"kevin-sandbox: {report.details_line()}{extra}", file=sys.stderr, flush=True)
    if module:
        sys.argv = [module, *rest]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    try:
        os.execvp(rest[0], rest)
    except OSError as exc:
        print(f"kevin-sandbox: cannot run {rest[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
