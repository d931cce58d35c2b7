"""Find the load_inline calls of a candidate without running it in this process.

First statically (``source.calls.extract_static``: constant folding of the arguments). When an
argument is computed at run time, the candidate's top level runs in a child process (CPU only, no
secrets in its environment, time-limited, killable) with load_inline replaced by a recorder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading

from kevin_agent.eval_modes import SandboxMode
from kevin_agent.evaluate.processes import kill_group, remove_tree, scrubbed_environment
from kevin_agent.evaluate.protocol import RecordReply
from kevin_agent.evaluate.sandbox.limits import limit_message
from kevin_agent.evaluate.sandbox.relay import EXIT_LIMIT
from kevin_agent.evaluate.source.calls import ExtensionSpec, extract_static
from kevin_agent.evaluate.source.consts import MAX_SOURCE_BYTES, ConstantTooLarge, NotStatic
from kevin_agent.safe_text import candidate_text


class SourceExtractionError(Exception):
    """The candidate's load_inline arguments could not be found (message is for the model)."""


def child_environment(scratch: str | None = None) -> dict[str, str]:
    """The environment for candidate code: the GPU worker's allow-list (no secrets), no GPU, HOME
    and TMPDIR its ``scratch`` folder."""
    env = scrubbed_environment(scratch=scratch)
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


MAX_REPLY_BYTES = 16_000_000  # the recorder's reply: every recorded call's sources (the relay's cap on output)


def record_command(path: str, scratch: str, sandbox: SandboxMode, reply_fd: int) -> list[str]:
    """The recorder's command line, confined to its scratch folder unless ``sandbox`` is "off";
    it replies on the pipe ``reply_fd``."""
    argv = ["kevin_agent.evaluate.worker.record", path, str(reply_fd)]
    if sandbox == "off":
        return [sys.executable, "-m", *argv]
    from kevin_agent.evaluate.sandbox import launch_command, record_policy
    from kevin_agent.paths import protected_paths

    return launch_command(record_policy(scratch, protect=protected_paths()), argv, sandbox, module=True)


def record_in_child(code: str, timeout_s: float = 120.0, sandbox: SandboxMode = "auto") -> list[ExtensionSpec]:
    """Run the candidate's top level in a CPU-only, confined child with load_inline recording its
    arguments. Its scratch folder is removed whatever the candidate made of it (``remove_tree``)."""
    scratch = tempfile.mkdtemp(prefix="kevin-record-")
    try:
        returncode, reply, stderr = _run_recorder(code, scratch, timeout_s, sandbox)
    finally:
        remove_tree(scratch)
    return _specs_from(returncode, reply, stderr)


def _run_recorder(code: str, scratch: str, timeout_s: float, sandbox: SandboxMode) -> tuple[int, bytes, str]:
    """(exit status, what came on the reply pipe, stderr) of the recorder on ``code``. What the
    candidate prints on stdout is never read: the reply has its own pipe."""
    path = os.path.join(scratch, "candidate.py")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(code)
    reply_r, reply_w = os.pipe()
    try:
        proc = subprocess.Popen(
            record_command(path, scratch, sandbox, reply_w), pass_fds=(reply_w,),
            cwd=scratch, env=child_environment(scratch), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True,
        )
    finally:
        os.close(reply_w)
    reply = _Reader(reply_r)
    try:
        _, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        kill_group(proc)  # the whole group: the candidate may have spawned
        raise SourceExtractionError(
            f"the module's top level did not finish within {timeout_s:.0f} s while looking for load_inline"
        ) from exc
    finally:
        kill_group(proc)  # nothing the candidate started outlives the recording
        reply.join()
    return proc.returncode, reply.data, stderr or ""


class _Reader(threading.Thread):
    """Reads the reply pipe while the recorder runs (a reply larger than the pipe's buffer would
    otherwise block it): the first MAX_REPLY_BYTES + 1 bytes, the rest drained and dropped."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd, self.kept = fd, bytearray()
        self.start()

    @property
    def data(self) -> bytes:
        return bytes(self.kept)

    def run(self) -> None:
        try:
            while chunk := os.read(self.fd, 1 << 16):
                if len(self.kept) <= MAX_REPLY_BYTES:
                    self.kept += chunk[: MAX_REPLY_BYTES + 1 - len(self.kept)]
        finally:
            os.close(self.fd)

    def join(self, timeout: float | None = 10.0) -> None:
        super().join(timeout)


def _specs_from(returncode: int, reply: bytes, stderr: str) -> list[ExtensionSpec]:
    """The recorded specs, or a SourceExtractionError whose message carries at most a few KB of
    the candidate's words (``safe_text.candidate_text``)."""
    if returncode == EXIT_LIMIT and limit_message(stderr):  # the sandbox stopped it: say which bound
        raise SourceExtractionError(f"running the module's top level: {limit_message(stderr)}")
    if len(reply) > MAX_REPLY_BYTES:
        raise SourceExtractionError(f"the recorded load_inline calls are over {MAX_REPLY_BYTES:,} bytes")
    for found in RecordReply.from_output(reply.decode("utf-8", errors="replace")):
        try:
            specs = [ExtensionSpec.from_dict(raw) for raw in found.specs]
        except (ValueError, KeyError, TypeError):
            continue  # not a well-formed reply
        if specs:
            return specs
        if found.error:
            raise SourceExtractionError(f"running the module's top level raised: {candidate_text(str(found.error))}")
    if returncode != 0:
        tail = stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise SourceExtractionError(f"running the module's top level failed: {candidate_text(tail[0])}")
    raise SourceExtractionError("no load_inline call found (the module must call load_inline when imported)")


def extract_specs(code: str, timeout_s: float = 120.0,
                  sandbox: SandboxMode = "auto") -> tuple[list[ExtensionSpec], str]:
    """All load_inline specs of a candidate and how they were found ("static" or "child")."""
    if len(code.encode("utf-8", errors="replace")) > MAX_SOURCE_BYTES:
        raise SourceExtractionError(f"the answer is over {MAX_SOURCE_BYTES:,} bytes (1 MB)")
    if "load_inline" not in code:
        raise SourceExtractionError("no load_inline call found (compile your CUDA code with load_inline)")
    try:
        specs = extract_static(code)
        if specs:
            return specs, "static"
    except SyntaxError as exc:
        raise SourceExtractionError(f"syntax error at line {exc.lineno}: {exc.msg}") from exc
    except ConstantTooLarge as exc:
        raise SourceExtractionError(str(exc)) from exc
    except NotStatic:
        pass
    return record_in_child(code, timeout_s, sandbox), "child"
