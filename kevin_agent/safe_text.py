"""Text a candidate controls, made safe to show on a terminal.

Compiler errors quote the candidate's sources, a crash carries what it printed, an exception its
message: an escape sequence there (``ESC ] 52`` sets the clipboard, ``ESC [ 2 J`` clears the
screen, a carriage return overwrites a line, a bidi override reorders it) would be interpreted
by the user's terminal. ``terminal_safe`` spells every such character out (``\\x1b``), keeping
line breaks and tabs, so people and the model both see what was written. ``capped`` bounds the
length of such text (a candidate printing megabytes would otherwise fill the next prompt and the
run store): ``candidate_text`` does both.
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


# Characters of one candidate-controlled text (a compiler's errors, a crash's output, an exception's
# message) that reach the model, the run store or a face; a verdict's whole message gets twice that.
MAX_CANDIDATE_TEXT = 4000
MAX_MESSAGE = 2 * MAX_CANDIDATE_TEXT


def capped(text: str, limit: int = MAX_CANDIDATE_TEXT) -> str:
    """``text`` cut to at most ``limit`` characters, with a note saying how much was cut (the
    head is kept: compilers and tracebacks put the first error first)."""
    if len(text) <= limit:
        return text
    note = f"\n... (cut: {len(text):,} characters in all, the first {{kept:,}} shown)"
    kept = max(0, limit - len(note) - 8)
    return text[:kept] + note.format(kept=kept)


def candidate_text(text: str, limit: int = MAX_CANDIDATE_TEXT) -> str:
    """A candidate's words made safe to travel: at most ``limit`` characters, control characters
    spelled out (``terminal_safe``). Cut before spelling (the work stays bounded) and after it
    (spelling makes text longer)."""
    return capped(terminal_safe(capped(text, limit)), limit)
