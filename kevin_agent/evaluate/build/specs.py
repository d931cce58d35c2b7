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

from kevin_agent.evaluate.processes import kill_group, scrubbed_environment
from kevin_agent.evaluate.protocol import RecordReply
from kevin_agent.evaluate.sandbox.limits import limit_message
from kevin_agent.evaluate.sandbox.relay import EXIT_LIMIT
from kevin_agent.evaluate.source.calls import ExtensionSpec, extract_static
from kevin_agent.evaluate.source.consts import MAX_SOURCE_BYTES, ConstantTooLarge, NotStatic


class SourceExtractionError(Exception):
    """The candidate's load_inline arguments could not be found (message is for the model)."""


def child_environment(scratch: str | None = None) -> dict[str, str]:
    """The environment for candidate code: the GPU worker's allow-list (no secrets), no GPU, HOME
    and TMPDIR its ``scratch`` folder."""
    env = scrubbed_environment(scratch=scratch)
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def record_command(path: str, scratch: str, sandbox: str) -> list[str]:
    """The recorder's command line, confined to its scratch folder unless ``sandbox`` is "off"."""
    argv = ["kevin_agent.evaluate.worker.record", path]
    if sandbox == "off":
        return [sys.executable, "-m", *argv]
    from kevin_agent.evaluate.sandbox import launch_command, record_policy
    from kevin_agent.paths import protected_paths

    return launch_command(record_policy(scratch, protect=protected_paths()), argv, sandbox, module=True)


def record_in_child(code: str, timeout_s: float = 120.0, sandbox: str = "auto") -> list[ExtensionSpec]:
    """Run the candidate's top level in a CPU-only, confined child with load_inline recording its
    arguments."""
    with tempfile.TemporaryDirectory(prefix="kevin-record-") as scratch:
        path = os.path.join(scratch, "candidate.py")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(code)
        proc = subprocess.Popen(
            record_command(path, scratch, sandbox),
            cwd=scratch, env=child_environment(scratch), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            kill_group(proc)  # the whole group: the candidate may have spawned
            proc.communicate()
            raise SourceExtractionError(
                f"the module's top level did not finish within {timeout_s:.0f} s while looking for load_inline"
            ) from exc
        finally:
            kill_group(proc)  # nothing the candidate started outlives the recording
    if proc.returncode == EXIT_LIMIT and limit_message(stderr):  # the sandbox stopped it: say which bound
        raise SourceExtractionError(f"running the module's top level: {limit_message(stderr)}")
    for reply in RecordReply.from_output(stdout):
        try:
            specs = [ExtensionSpec.from_dict(raw) for raw in reply.specs]
        except (ValueError, KeyError, TypeError):
            continue  # not our recorder's line (the candidate printed the marker itself)
        if specs:
            return specs
        if reply.error:
            raise SourceExtractionError(f"running the module's top level raised: {reply.error}")
    if proc.returncode != 0 and not stdout.strip():
        tail = stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise SourceExtractionError(f"running the module's top level failed: {tail[0]}")
    raise SourceExtractionError("no load_inline call found (the module must call load_inline when imported)")


def extract_specs(code: str, timeout_s: float = 120.0, sandbox: str = "auto") -> tuple[list[ExtensionSpec], str]:
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
