"""Long work off the main thread, so Ctrl-C reaches the command: the first cancels (finished work
is kept), a second quits at once. Shared by ``kevin optimize`` and ``kevin bench``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def play_interruptible(work: Callable[[threading.Event], T], cancel: threading.Event, *, name: str,
                       on_cancel: Callable[[], None], on_quit: Callable[[], None]) -> T:
    """``work(cancel)`` on a thread; its result, or its exception raised here. The first Ctrl-C
    sets ``cancel`` and calls ``on_cancel``; a second (at any point after the first) calls
    ``on_quit`` and raises KeyboardInterrupt."""
    box: dict[str, Any] = {}
    finished = threading.Event()  # not Thread.join: an interrupted join can return early

    def run() -> None:
        try:
            box["result"] = work(cancel)
        except BaseException as err:
            box["error"] = err
        finally:
            finished.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    try:
        while not finished.wait(0.2):
            pass
    except KeyboardInterrupt:
        try:  # a second Ctrl-C at any point after the first one (even before this line) quits now
            cancel.set()
            on_cancel()
            while not finished.wait(0.2):
                pass
        except KeyboardInterrupt:
            on_quit()
            raise
    if "error" in box:
        raise box["error"]
    result: T = box["result"]
    return result
