"""Messages between ``kevin eval`` and a warm evaluator: one JSON object per line.

Request: ``{"task": Task.to_dict(), "code": "..."}``. Replies, in order: any number of
``{"wait": "..."}`` (why the GPU stage waits), then one of ``{"verdict": Verdict.to_dict()}`` or
``{"error": {"kind": "input" | "environment" | "internal", "message": "..."}}``.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any, Optional

REQUEST_LIMIT_BYTES = 16 << 20  # a task and a candidate (each far below this)
REPLY_LIMIT_BYTES = 64 << 20  # a verdict with its compiler output


class WireError(Exception):
    """The other side sent something that is not a message, or too much of it."""


def send(conn: socket.socket, message: dict[str, Any]) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


class LineReader:
    """Reads JSON lines from ``conn``; a line longer than ``limit`` is a WireError."""

    def __init__(self, conn: socket.socket, limit: int) -> None:
        self.conn = conn
        self.limit = limit
        self.buffer = b""

    def read(self) -> Optional[dict[str, Any]]:
        """The next message, or None at the end of the stream."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > self.limit:
                raise WireError(f"a message longer than {self.limit} bytes")
            chunk = self.conn.recv(1 << 16)
            if not chunk:
                if self.buffer:
                    raise WireError("the stream ended inside a message")
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        if len(line) > self.limit:
            raise WireError(f"a message longer than {self.limit} bytes")
        try:
            message = json.loads(line)
        except ValueError as err:
            raise WireError(f"not JSON: {err}") from None
        if not isinstance(message, dict):
            raise WireError("a message is not a JSON object")
        return message


def peer_credentials(conn: socket.socket) -> tuple[int, int]:
    """The process id and user id at the other end of a Unix socket (SO_PEERCRED)."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", raw)
    return pid, uid
