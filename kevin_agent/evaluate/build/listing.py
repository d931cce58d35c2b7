"""List the kernels of a built extension in a confined child, never in kevin's own process.

The ``.so`` is a binary the candidate's sources produced; parsing it (``provenance.symbols``) is
pure Python but input-driven, so it runs in ``provenance.list_child`` under
``sandbox.listing_policy``. The parent opens the module (never through a link, a regular file
under ``MAX_LISTED_BYTES``) and hands it over as the child's stdin, so the child is granted no
file at all beyond the Python install and a scratch folder; it starts no process, opens no
socket, and has at most 1 GB of address space, 1 MB of output and ``LISTING_TIMEOUT_S``. The
answer comes back as one JSON line on its stdout. Any failure (the module, a timeout, a bound, a
crash, no answer) is a listing with no kernels and a note ``listing failed: ...``, which
provenance treats as "no own kernel" (it fails closed).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
from typing import Any

from kevin_agent.eval_modes import SandboxMode
from kevin_agent.evaluate.processes import kill_group, scrubbed_environment
from kevin_agent.evaluate.provenance.symbols import MAX_KERNELS, MAX_LISTED_BYTES, ExtensionKernels
from kevin_agent.evaluate.sandbox.limits import limit_message

LISTING_TIMEOUT_S = 60.0  # a listing takes ~50 ms, the confined start ~0.3 s
CHILD = "kevin_agent.evaluate.provenance.list_child"


def listing_command(module_path: str, scratch: str, sandbox: SandboxMode) -> list[str]:
    """The child's command line, confined to ``scratch`` unless ``sandbox`` is "off"."""
    if sandbox == "off":
        return [sys.executable, "-m", CHILD, module_path]
    from kevin_agent.evaluate.sandbox import launch_command, listing_policy
    from kevin_agent.paths import protected_paths

    return launch_command(listing_policy(scratch, protect=protected_paths()), [CHILD, module_path], sandbox,
                          module=True)


def failed_listing(module_path: str, why: str) -> dict[str, Any]:
    """The listing of an extension whose kernels could not be listed: none, and why."""
    return ExtensionKernels(module_path, (), notes=(f"listing failed: {why}",)).to_dict()


# Failures of this machine at that moment (a loaded host, no process slot), not of the module:
# a build whose listing failed so is not cached, so the next evaluation lists it again.
TRANSIENT_FAILURES = ("listing failed: it did not finish within", "listing failed: the listing child did not start")


def failed_for_now(listing: dict[str, Any] | None) -> bool:
    """Whether ``listing`` failed for a reason that is not the module's own (see TRANSIENT_FAILURES)."""
    notes = (listing or {}).get("notes") or ()
    return any(str(note).startswith(TRANSIENT_FAILURES) for note in notes)


def open_module(module_path: str) -> int:
    """A descriptor of the module: a regular file under MAX_LISTED_BYTES, not through a link."""
    fd = os.open(module_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_LISTED_BYTES:
        os.close(fd)
        raise OSError(f"not a regular file under {MAX_LISTED_BYTES:,} bytes")
    return fd


def kernel_listing(module_path: str, sandbox: SandboxMode = "auto",
                   timeout_s: float = LISTING_TIMEOUT_S) -> dict[str, Any]:
    """``ExtensionKernels.to_dict()`` of the ``.so`` at ``module_path``, listed in a confined
    child; ``failed_listing`` on any failure. Never raises."""
    try:
        module = open_module(module_path)
    except OSError as exc:
        return failed_listing(module_path, f"cannot open the module: {exc.strerror or exc}")
    with tempfile.TemporaryDirectory(prefix="kevin-list-") as scratch:
        try:
            proc = subprocess.Popen(
                listing_command(module_path, scratch, sandbox), cwd=scratch, env=scrubbed_environment(scratch=scratch),
                stdin=module, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            )
        except OSError as exc:
            return failed_listing(module_path, f"the listing child did not start: {exc}")
        finally:
            os.close(module)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return failed_listing(module_path, f"it did not finish within {timeout_s:g} s")
        finally:
            kill_group(proc)  # nothing of the child outlives the listing
    return _reply(module_path, proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


def _reply(module_path: str, returncode: int, out: str, err: str) -> dict[str, Any]:
    """The child's listing, checked, or ``failed_listing`` saying what went wrong."""
    if returncode != 0:
        tail = limit_message(err) or (err.strip().splitlines() or [f"exit status {returncode}"])[-1]
        return failed_listing(module_path, tail[:300])
    try:
        raw = json.loads((out.strip().splitlines() or [""])[-1])
        kernels, notes = raw["kernels"], raw.get("notes") or []
        if not (isinstance(kernels, list) and len(kernels) <= MAX_KERNELS and isinstance(notes, list)
                and all(isinstance(k, str) for k in [*kernels, *notes])):
            raise ValueError("not a listing")
        listing = ExtensionKernels.from_dict({**raw, "path": module_path})
    except (ValueError, KeyError, TypeError) as exc:
        return failed_listing(module_path, f"no listing came back ({exc})")
    return listing.to_dict()
