"""Where torch.compile's caches live in a worker: the folders its parent named, else beside the
build cache, so that every worker (the compile-ahead job's, the baseline job's) shares them.

Inductor's ``cache_dir()`` writes its default (``$TMPDIR/torchinductor_<user>``) into
``TORCHINDUCTOR_CACHE_DIR`` the first time anything asks, and the worker's warm imports ask; after
that the variable no longer tells a folder the parent chose from Inductor's own default. So the
parent's values are read here, when the worker package is first imported, before torch is."""

from __future__ import annotations

import os
import sys
from pathlib import Path

INDUCTOR_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
TRITON_VARIABLE = "TRITON_CACHE_DIR"
FROM_PARENT: dict[str, str | None] = {name: os.environ.get(name) for name in (INDUCTOR_VARIABLE, TRITON_VARIABLE)}


def point_caches(cache_dir: Path) -> dict[str, str]:
    """Set both variables (the parent's folder, else ``cache_dir/inductor`` and ``cache_dir/triton``)
    and drop what Inductor kept of the folder it used before; the folders set."""
    folders = {INDUCTOR_VARIABLE: FROM_PARENT[INDUCTOR_VARIABLE] or str(cache_dir / "inductor"),
               TRITON_VARIABLE: FROM_PARENT[TRITON_VARIABLE] or str(cache_dir / "triton")}
    os.environ.update(folders)
    utils = sys.modules.get("torch._inductor.utils")
    clear = getattr(utils, "clear_caches", None)
    if callable(clear):  # its in-memory caches of generated code point into the old folder
        clear()
    return folders
