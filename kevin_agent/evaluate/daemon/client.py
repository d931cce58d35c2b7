"""``kevin eval``'s side: hand a task and a candidate to a warm evaluator, start one, stop them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from kevin_agent.data import Task, Verdict
from kevin_agent.errors import EnvironmentProblem, UserInputError
from kevin_agent.evaluate.api import EvalSettings, WaitCallback
from kevin_agent.evaluate.daemon.address import DaemonAddress
from kevin_agent.evaluate.daemon.wire import REPLY_LIMIT_BYTES, LineReader, WireError, peer_credentials, send

LISTEN_WAIT_S = 5.0


def evaluate_on_daemon(address: DaemonAddress, task: Task, code: str,
                       on_wait: Optional[WaitCallback] = None) -> Optional[Verdict]:
    """The warm evaluator's verdict, or None when none answers at ``address`` (none started, it
    died, or it ended without a verdict: evaluate in this process instead). A reference task that
    fails, or an environment that cannot evaluate, raises as in this process."""
    if not address.socket.exists():
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            conn.connect(str(address.socket))
            send(conn, {"task": task.to_dict(), "code": code})
        except OSError:  # a stale socket: its daemon is gone
            return None
        reader = LineReader(conn, REPLY_LIMIT_BYTES)
        while True:
            try:
                message = reader.read()
            except (WireError, OSError):
                return None
            if message is None:
                return None
            if "wait" in message:
                if on_wait is not None:
                    on_wait(str(message["wait"]))
            elif "verdict" in message:
                try:
                    return Verdict.from_dict(message["verdict"])
                except (KeyError, TypeError, ValueError):
                    return None
            elif "error" in message:
                _raise(message["error"])
                return None
    finally:
        conn.close()


def _raise(error: object) -> None:
    """An input or environment error the warm evaluator met, raised here as it would have been."""
    if not isinstance(error, dict):
        return
    kind, text = error.get("kind"), str(error.get("message", ""))
    if kind == "input":
        raise UserInputError(text)
    if kind == "environment":
        raise EnvironmentProblem(text)


def daemon_environment() -> dict[str, str]:
    """This process's environment without credentials (a warm evaluator talks to no model)."""
    from kevin_agent.evaluate.processes import is_secret_name, package_root

    env = {name: value for name, value in os.environ.items() if not is_secret_name(name)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root(), os.environ.get("PYTHONPATH", "")) if p)
    return env


def start_daemon(address: DaemonAddress, settings: EvalSettings, idle_s: float) -> Optional[int]:
    """Start a warm evaluator for ``address`` in the background (its own session, this working
    folder, output in its log) and wait until it listens (at most ``LISTEN_WAIT_S``: it binds its
    socket before any heavy import); its pid, or None when it could not start. One already serving
    there keeps its lock and the new one exits at once."""
    command = [sys.executable, "-m", "kevin_agent.evaluate.daemon", "--folder", str(address.folder),
               "--key", address.key, "--settings", json.dumps(settings.to_dict()), "--idle", str(idle_s)]
    try:
        fd = os.open(address.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=daemon_environment(),
                                start_new_session=True, close_fds=True)
    except OSError:
        return None
    finally:
        os.close(fd)
    deadline = time.monotonic() + LISTEN_WAIT_S  # listening before this kevin eval exits: the next one finds it
    while not address.socket.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc.pid


def stop_daemons(folder: Path) -> int:
    """Stop every warm evaluator listening in ``folder`` (SIGTERM to each one's process, read from
    its socket's peer); how many were stopped."""
    stopped = 0
    for path in sorted(folder.glob("*.sock")) if folder.is_dir() else []:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(str(path))
            pid, uid = peer_credentials(conn)
            if uid == os.getuid() and pid > 0:
                os.kill(pid, signal.SIGTERM)
                stopped += 1
        except OSError:
            continue
        finally:
            conn.close()
    return stopped

