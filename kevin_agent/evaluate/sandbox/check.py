"""Self-check: attack a confined child and report, for each attack, blocked or NOT BLOCKED.

Backs ``python -m kevin_agent.evaluate.sandbox`` (later ``kevin doctor`` and ``kevin eval
--check-sandbox``). Every attack also runs in an unconfined child, so a "blocked" means the
sandbox stopped it; an attack that fails even without the sandbox is reported as n/a.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kevin_agent.eval_modes import SandboxMode
from kevin_agent.evaluate.sandbox.attacks import LEGIT
from kevin_agent.evaluate.sandbox.attacks import SELF_CHECK_ATTACKS as ATTACKS
from kevin_agent.evaluate.sandbox.check_child import MARKER
from kevin_agent.evaluate.sandbox.policy import SandboxPolicy, device_paths, worker_policy
from kevin_agent.evaluate.sandbox.support import probe

BLOCKED, NOT_BLOCKED, ALLOWED, FAILED, NOT_APPLICABLE = "blocked", "NOT BLOCKED", "allowed", "FAILED", "n/a"


@dataclass
class CheckResult:
    name: str
    what: str
    expect: str  # "blocked" (an attack) or "allowed" (what candidates legitimately do)
    outcome: str  # blocked | NOT BLOCKED | allowed | FAILED | n/a
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome in (BLOCKED, ALLOWED, NOT_APPLICABLE)


class _Listener:
    """A TCP listener on 127.0.0.1 that accepts and closes connections."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


@contextmanager
def attack_targets(root: Path) -> Iterator[dict]:
    """Targets outside a sandbox rooted at ``root/scratch``: a home file, a repository, a TCP
    listener on 127.0.0.1, a victim process. The home file is an existing one of the real home
    when one is readable, else a temporary one created (and removed) there, else (no writable
    home) one in ``root``, outside the sandbox's scratch, so the attack still reads a hidden file."""
    scratch, repo = root / "scratch", root / "repo"
    scratch.mkdir(parents=True, exist_ok=True)
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "task.py").write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    home = Path.home()
    home_file, created = _home_file(home, root)
    listener = _Listener()
    env = {**os.environ, "KEVIN_SANDBOX_CHECK_SECRET": "not-for-candidates"}
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield {"home_file": str(home_file), "home_dir": str(home), "repo_dir": str(repo),
               "repo_file": str(repo / "task.py"), "port": listener.port, "victim_pid": victim.pid,
               "scratch": str(scratch)}
    finally:
        victim.kill()
        victim.wait()
        listener.close()
        if created:
            home_file.unlink(missing_ok=True)


def _home_file(home: Path, fallback_dir: Path) -> tuple[Path, bool]:
    for name in (".profile", ".bashrc", ".gitconfig", ".bash_history"):
        path = home / name
        if path.is_file() and os.access(path, os.R_OK):
            return path, False
    for folder in (home, fallback_dir):  # HOME=/nonexistent, a read-only home: the check's own folder
        path = folder / f".kevin-sandbox-check-{os.getpid()}"
        try:
            path.write_text("a secret the sandbox must hide\n")
        except OSError:
            continue
        return path, True
    raise OSError(f"cannot write a secret file in {home} or {fallback_dir}")


def run_check_child(policy: SandboxPolicy, targets: dict, mode: SandboxMode, cwd: Path, timeout_s: float = 120.0,
                    python: Optional[str] = None) -> dict:
    """Run ``check_child`` confined by ``policy`` (``mode="off"``: unconfined) through the launcher,
    as every real child starts (its namespaces, hidden folders and bounds included); its parsed output."""
    from kevin_agent.evaluate.sandbox.launch import launch_command

    command = launch_command(policy, ["kevin_agent.evaluate.sandbox.check_child", "--launched", "--policy",
                                      policy.to_json(), "--targets", json.dumps(targets)],
                             mode, python=python, module=True)
    try:
        proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"report": None, "error": f"the check child did not finish within {timeout_s:.0f} s", "results": {}}
    for line in proc.stdout.splitlines():
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"report": None, "error": f"the check child exited with {proc.returncode}: {tail}", "results": {}}


def check_sandbox(mode: SandboxMode = "auto", timeout_s: float = 120.0) -> tuple[str, list[CheckResult]]:
    """Confine a child with a worker policy and attack it; (the sandbox line, one result per check)."""
    root = Path(tempfile.mkdtemp(prefix="kevin-sandbox-check-"))
    try:
        with attack_targets(root) as targets:
            gpu = len(device_paths(gpu=True)) > len(device_paths(gpu=False))  # any GPU device node
            policy = worker_policy(root / "scratch", gpu=gpu)
            confined = run_check_child(policy, targets, mode, root / "scratch", timeout_s)
            control = run_check_child(policy, targets, "off", root / "scratch", timeout_s)
        report = confined.get("report")
        line = f"sandbox: {report['applied']}" if report else f"sandbox: none ({confined.get('error')})"
        results = compare(confined.get("results", {}), control.get("results", {}))
        for name, run in (("confined", confined), ("control", control)):
            if not run.get("results") and run.get("error"):
                results.append(CheckResult(f"{name}_child", f"run the {name} check child", ALLOWED, FAILED,
                                           run["error"]))
        return line, results
    finally:
        shutil.rmtree(root, ignore_errors=True)


def compare(confined: dict, control: dict) -> list[CheckResult]:
    results = []
    for attack in LEGIT:
        got = confined.get(attack.name, {"ok": False, "error": "not run"})
        outcome = ALLOWED if got["ok"] else FAILED
        results.append(CheckResult(attack.name, attack.what, "allowed", outcome, got["error"]))
    for attack in ATTACKS:
        got = confined.get(attack.name)
        base = control.get(attack.name, {"ok": False, "error": "not run"})
        if got is None:  # the confined child died or timed out first: nothing was shown blocked
            outcome, detail = FAILED, "not run"
        elif got["ok"]:
            outcome, detail = NOT_BLOCKED, "succeeded inside the sandbox"
        elif not base["ok"]:
            outcome, detail = NOT_APPLICABLE, f"fails without the sandbox too: {base['error']}"
        else:
            outcome, detail = BLOCKED, got["error"]
        results.append(CheckResult(attack.name, attack.what, "blocked", outcome, detail))
    return results


def coverage(abi: int, has_seccomp: bool) -> list[str]:
    """What confinement covers at Landlock ``abi`` with or without seccomp, one line per area
    (docs/sandbox.md, "Per Landlock ABI")."""
    rights = ["read", "write", "execute", "create", "remove"] + (["rename across folders"] if abi >= 2 else [])
    rights += (["truncate"] if abi >= 3 else []) + (["ioctl on devices"] if abi >= 5 else [])
    lines = [f"files: Landlock ({', '.join(rights)})" if abi >= 1 else "files: NOT confined (no Landlock)"]
    lines.append("file metadata (chmod, chown, utimes, xattr) and watches (inotify, fanotify): "
                 + ("refused by seccomp" if has_seccomp else
                 "NOT refused (no seccomp; Landlock does not cover it)"))
    net = ["sockets refused by seccomp"] if has_seccomp else []
    net += ["TCP bind/connect refused by Landlock"] if abi >= 4 else []
    lines.append("network: " + ("; ".join(net) if net else "NOT confined"))
    lines.append("signals, abstract unix sockets: " + ("scoped to the sandbox (Landlock)" if abi >= 6 else
                 "NOT scoped (Landlock ABI < 6): other processes of this user can be signalled"))
    lines.append("threads: " + ("every thread at once (Landlock TSYNC)" if abi >= 8 else
                 "threads started before the first layer keep its rights (Landlock ABI < 8)"))
    lines.append("not covered: GPU memory and time, timing side channels, stat() of refused paths outside the "
                 "hidden folders (existence, size), world-readable system files")
    return lines


def isolation_probe(timeout_s: float = 60.0) -> tuple[str, float]:
    """Start ``/bin/true`` the way a compile starts (bounded compile policy, launcher); (what
    isolation it got, e.g. "pid namespace, at most 1024 processes", and the seconds it took)."""
    from kevin_agent.evaluate.sandbox.launch import launch_command
    from kevin_agent.evaluate.sandbox.policy import compile_policy

    with tempfile.TemporaryDirectory(prefix="kevin-sandbox-probe-") as folder:
        command = launch_command(compile_policy(folder), ["/bin/true"], "auto")
        start = time.monotonic()
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                                  env={**os.environ, "KEVIN_SANDBOX_VERBOSE": "1"}, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return f"the probe did not finish within {timeout_s:.0f} s", timeout_s
        seconds = time.monotonic() - start
    for line in proc.stderr.splitlines():
        if line.startswith("kevin-sandbox: sandbox: ") and "; " in line:
            return line.split("; ", 1)[1], seconds
    return f"unknown (the probe exited with {proc.returncode})", seconds


def format_table(line: str, results: list[CheckResult]) -> str:
    width = max(len(r.what) for r in results)
    rows = [line, ""]
    for r in results:
        rows.append(f"  {r.what:<{width}}  {r.outcome:<11}  {r.detail}"[:200].rstrip())
    bad = [r for r in results if not r.ok]
    rows += ["", "all checks passed" if not bad else f"{len(bad)} check(s) failed: " + ", ".join(r.name for r in bad)]
    return "\n".join(rows)


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kevin_agent.evaluate.sandbox",
                                     description="Check that this host confines candidate code.")
    parser.add_argument("--mode", choices=("auto", "required"), default="auto")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    support = probe()
    line, results = check_sandbox(args.mode)
    if args.json:
        print(json.dumps({"support": support.to_dict(), "sandbox": line,
                          "results": [r.__dict__ for r in results]}, indent=2))
    else:
        print(f"host: {support.summary()} (kernel {support.kernel}, {support.arch})")
        print(format_table(line, results))
    return 0 if all(r.ok for r in results) else 1
