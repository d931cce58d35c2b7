"""The warm evaluator's process: holds the lock of its address, listens on its socket, serves
``kevin eval`` requests (concurrent ones side by side) with one long-lived evaluator, tops its
workers up when none is in flight, and exits after its idle time. Model-written code reaches only
the evaluator's confined children, exactly as in ``kevin eval``'s own process."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kevin_agent.data import Task
from kevin_agent.errors import EnvironmentProblem, UserInputError
from kevin_agent.evaluate.api import EvalSettings, Evaluator
from kevin_agent.evaluate.daemon.address import DaemonAddress
from kevin_agent.evaluate.daemon.wire import REQUEST_LIMIT_BYTES, LineReader, WireError, peer_credentials, send

DAEMON_SPARES = 2  # ready workers: one for the next request while another starts behind it
ACCEPT_POLL_S = 0.25  # how often the idle clock is read while no request arrives
EvaluatorFactory = Callable[[EvalSettings], Evaluator]


def daemon_evaluator(settings: EvalSettings) -> Evaluator:
    """This machine's evaluator with ``DAEMON_SPARES`` ready workers (KEVIN_EVALUATOR, when set,
    picks another, e.g. a replay file in tests)."""
    from kevin_agent.evaluate.api import EVALUATOR_ENV
    from kevin_agent.evaluate.evaluator import CudaEvaluator, make_evaluator

    spec = os.environ.get(EVALUATOR_ENV)
    return make_evaluator(spec, settings) if spec else CudaEvaluator(settings, spares=DAEMON_SPARES)


@contextlib.contextmanager
def held_lock(address: DaemonAddress) -> Iterator[bool]:
    """The address's lock for this process's life: False when another warm evaluator holds it."""
    fd = os.open(address.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def listen(address: DaemonAddress) -> socket.socket:
    """A listening socket at the address (a stale one left by a dead daemon is replaced), only
    this user may connect."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(address.socket)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mask = os.umask(0o177)
    try:
        listener.bind(str(address.socket))
    finally:
        os.umask(mask)
    listener.listen(16)
    return listener


class Activity:
    """Requests in flight and when the last one ended: the idle clock, and whether the evaluator
    can serve on (an environment failure ends the daemon)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.active = 0
        self.since = time.monotonic()
        self.failed = False

    def begin(self) -> None:
        with self._lock:
            self.active += 1

    def end(self, served_on: bool) -> bool:
        """One request ended; True when it was the last one in flight."""
        with self._lock:
            self.active -= 1
            self.since = time.monotonic()
            self.failed = self.failed or not served_on
            return self.active == 0

    def idle_s(self) -> float:
        with self._lock:
            return 0.0 if self.active else time.monotonic() - self.since


def serve(address: DaemonAddress, settings: EvalSettings, idle_s: float,
          make: EvaluatorFactory = daemon_evaluator) -> int:
    """Serve requests, each in its own thread (concurrent ``kevin eval`` calls share the compile
    pool and the lanes, as one batch's candidates do), until ``idle_s`` pass with none in flight,
    or the evaluator's environment fails. 0 when it ended normally (or another warm evaluator
    already serves this address)."""
    with held_lock(address) as mine:
        if not mine:
            return 0
        listener = listen(address)
        inode = os.stat(address.socket).st_ino
        evaluator = None
        try:
            evaluator = make(settings)  # requests that arrive meanwhile wait in the backlog
            evaluator.check_environment()
            evaluator.start()
            activity = Activity()
            listener.settimeout(ACCEPT_POLL_S)
            while not activity.failed:
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    if activity.idle_s() >= idle_s:
                        return 0
                    continue
                activity.begin()
                threading.Thread(target=_serve_one, args=(conn, evaluator, activity), daemon=True).start()
            return 1
        except Exception as err:
            print(f"kevin warm evaluator: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
            return 1
        finally:
            with contextlib.suppress(OSError):
                if os.stat(address.socket).st_ino == inode:
                    os.unlink(address.socket)
            listener.close()
            if evaluator is not None:
                evaluator.close()


def _serve_one(conn: socket.socket, evaluator: Evaluator, activity: Activity) -> None:
    """One connection's thread; the last request in flight tops the workers up as it ends (after
    its timing, never beside another's)."""
    served_on = False
    try:
        with conn:
            conn.settimeout(None)
            served_on = handle(conn, evaluator)
    finally:
        if activity.end(served_on) and served_on:
            with contextlib.suppress(Exception):
                evaluator.start()


def handle(conn: socket.socket, evaluator: Evaluator) -> bool:
    """Serve one connection; False when the evaluator can serve no more (its environment failed)."""
    if peer_credentials(conn)[1] != os.getuid():
        return True
    try:
        request = LineReader(conn, REQUEST_LIMIT_BYTES).read()
        if request is None:
            return True
        task, code = Task.from_dict(request["task"]), request["code"]
        if not isinstance(code, str):
            raise WireError("code is not text")
    except (WireError, KeyError, TypeError, ValueError) as err:
        _reply(conn, {"error": {"kind": "internal", "message": f"a bad request: {err}"}})
        return True
    lock = threading.Lock()
    cancel = threading.Event()
    threading.Thread(target=_cancel_on_hang_up, args=(conn, cancel), daemon=True).start()

    def on_wait(text: str) -> None:
        with lock:
            _reply(conn, {"wait": text})

    try:
        verdict = evaluator.evaluate(task, [code], cancel=cancel, on_wait=on_wait)[0]
        message: dict[str, Any] = {"verdict": verdict.to_dict()}
    except UserInputError as err:
        message = {"error": {"kind": "input", "message": str(err)}}
    except EnvironmentProblem as err:
        with lock:
            _reply(conn, {"error": {"kind": "environment", "message": str(err)}})
        return False
    with lock:
        _reply(conn, message)
    return True


def _cancel_on_hang_up(conn: socket.socket, cancel: threading.Event) -> None:
    """The client hung up (Ctrl-C) before its verdict: cancel its evaluation."""
    with contextlib.suppress(OSError):
        while conn.recv(4096):
            pass
    cancel.set()


def _reply(conn: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the client left: its evaluation is cancelled
        send(conn, message)
