"""The build cache's upkeep at an evaluator's start: the shared precompiled torch header, said out
loud while it is built, and the size cap.

The first build on a machine compiles the torch headers once (minutes, ~1 GB) before any
candidate can build; a warm start finds it in milliseconds. So when the header step is still
running after ``SLOW_AFTER_S`` the user hears what it is ("building the shared torch header
once...") and then how long it has run, every ``EVERY_S``, until it ends: on the evaluator's
notice channel (``on_wait``: stderr for the CLI, a progress message in the TUI and the editors).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Optional

from kevin_agent.evaluate.build.usage import evict_least_recent

SLOW_AFTER_S = 3.0  # a header already built answers far sooner
EVERY_S = 20.0
STARTING = ("building the shared torch header once, about 2 minutes on a laptop-class CPU (~1 GB in the "
            "build cache); later builds reuse it")


def with_header_notices(work: Callable[[], object], say: Callable[[str], None],
                        slow_after_s: float = SLOW_AFTER_S, every_s: float = EVERY_S) -> None:
    """Run ``work`` (the header step); if it is still running after ``slow_after_s``, say what it
    does, then how long it has run every ``every_s``, and when it is done."""
    done = threading.Event()
    start = time.monotonic()
    spoke = threading.Event()

    def talk() -> None:
        if done.wait(slow_after_s):
            return
        spoke.set()
        say(STARTING)
        while not done.wait(every_s):
            say(f"still building the shared torch header: {time.monotonic() - start:.0f} s so far")

    speaker = threading.Thread(target=talk, name="kevin-header-notice", daemon=True)
    speaker.start()
    try:
        work()
    finally:
        done.set()
        speaker.join()
    if spoke.is_set():
        say(f"built the shared torch header in {time.monotonic() - start:.0f} s; later builds reuse it")


def keep_under_cap(root: Path, cap_bytes: Optional[int], say: Callable[[str], None]) -> None:
    """Evict least recently used builds and headers past ``cap_bytes`` (None: no cap), saying what went."""
    if cap_bytes is None:
        return
    result = evict_least_recent(root, cap_bytes)
    if result.removed:
        say(f"build cache over its cap ({cap_bytes / 1e9:.1f} GB): removed {result.removed} least recently used "
            f"builds or headers ({result.freed / 1e6:.0f} MB); `kevin cache` shows what is left")
