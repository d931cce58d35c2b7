"""``python -m kevin_agent.evaluate.provenance.list_child NAME < EXTENSION.so``: the kernels
built into one extension, read from stdin (at most ``MAX_LISTED_BYTES``), as one JSON line on
stdout (``ExtensionKernels.to_dict()``; NAME is its ``path``).

The build step runs it confined (``build.listing``), with the module opened by the parent as
its stdin: the ``.so`` is a binary the candidate's sources produced, so parsing it never
happens in kevin's own process, and the child needs no right to read any file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import BinaryIO, Optional

from kevin_agent.evaluate.provenance.symbols import MAX_LISTED_BYTES, list_image


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m kevin_agent.evaluate.provenance.list_child NAME < EXTENSION.so", file=sys.stderr)
        return 2
    print(json.dumps(list_image(args[0], read_capped(sys.stdin.buffer, MAX_LISTED_BYTES + 1)).to_dict()), flush=True)
    return 0


def read_capped(stream: BinaryIO, limit: int, chunk: int = 1024 * 1024) -> bytes:
    """At most ``limit`` bytes of ``stream``, read a chunk at a time (``read(limit)`` would
    reserve all of ``limit`` at once)."""
    parts: list[bytes] = []
    left = limit
    while left > 0 and (part := stream.read(min(chunk, left))):
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


if __name__ == "__main__":
    sys.exit(main())
