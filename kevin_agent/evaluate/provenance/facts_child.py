"""``python -m kevin_agent.evaluate.provenance.facts_child NAME:KIND ... < FRAMES``: the provenance
facts of one build (``facts.gather``) as one JSON line on stdout.

Stdin holds one frame per argument, in order: its length as 8 little-endian bytes, then the bytes
of that file (an own object, KIND "obj", or a preprocessed translation unit, "cuda" or "cxx"). The
build step runs it confined (``build.facts``) with the files opened by the parent, so parsing the
candidate's compiler output never happens in kevin's own process.
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Sequence
from typing import BinaryIO, Optional

from kevin_agent.evaluate.provenance.facts import gather
from kevin_agent.evaluate.provenance.list_child import read_capped

MAX_FRAME = 512 * 1024 * 1024
KINDS = ("obj", "cuda", "cxx")


def read_frames(stream: BinaryIO, specs: Sequence[str]) -> list[tuple[str, str, bytes]]:
    """(name, kind, bytes) of each ``NAME:KIND`` in ``specs``; ValueError for a bad frame."""
    entries = []
    for spec in specs:
        name, _, kind = spec.rpartition(":")
        if kind not in KINDS or not name:
            raise ValueError(f"bad argument {spec!r}")
        head = stream.read(8)
        if len(head) != 8:
            raise ValueError("input ends early")
        (size,) = struct.unpack("<Q", head)
        if size > MAX_FRAME:
            raise ValueError(f"{name} is larger than {MAX_FRAME:,} bytes")
        data = read_capped(stream, size)
        if len(data) != size:
            raise ValueError("input ends early")
        entries.append((name, kind, data))
    return entries


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        facts = gather(read_frames(sys.stdin.buffer, args))
    except ValueError as exc:
        print(f"facts_child: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(facts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
