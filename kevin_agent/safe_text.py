"""Text a candidate controls, made safe to show on a terminal.

Compiler errors quote the candidate's sources, a crash carries what it printed, an exception its
message: an escape sequence there (``ESC ] 52`` sets the clipboard, ``ESC [ 2 J`` clears the
screen, a carriage return overwrites a line, a bidi override reorders it) would be interpreted
by the user's terminal. ``terminal_safe`` spells every such character out (``\\x1b``), keeping
line breaks and tabs, so people and the model both see what was written.
"""

from __future__ import annotations

import re

# C0 controls but tab and line feed, DEL, C1 controls, and the bidi embeddings, overrides and isolates
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _spelled(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """``text`` with control characters (other than newline and tab) and bidi controls spelled out."""
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(_spelled, text.replace("\r\n", "\n"))
