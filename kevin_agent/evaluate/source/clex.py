"""The one C/C++/CUDA lexer: a same-length shadow of the source with comments and literal contents
blanked, so scanners (the static checks, the split build) never see code inside them.

Newlines and offsets are kept, so a match in the shadow maps to the same line and column in the
source. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_RAW_OPEN = re.compile(r'R"([^()\\\s]{0,16})\(')
_INCLUDE_BEFORE = re.compile(r"#\s*include\s*$")


@dataclass
class Shadow:
    """The blanked text, and what the lexer could not read cleanly."""

    code: str
    raw_strings: bool = False  # the source holds C++ raw string literals (R"(...)")
    problems: list[str] = field(default_factory=list)  # "unterminated comment" / "... literal"


def shadow(src: str, fill: str = "_", keep_include_paths: bool = False) -> Shadow:
    """Comments become spaces; the contents of string and char literals become ``fill``.

    ``keep_include_paths`` leaves ``#include "file.h"`` readable. Unterminated comments or
    literals are blanked to the end (of the file, or of the line) and reported in ``problems``.
    """
    out = list(src)
    found = Shadow("")
    i, n = 0, len(src)
    while i < n:
        if src.startswith("//", i):
            i = _blank_to(out, i, _line_comment_end(src, i))
        elif src.startswith("/*", i):
            end = src.find("*/", i + 2)
            if end < 0:
                found.problems.append("unterminated comment")
            i = _blank_to(out, i, n if end < 0 else end + 2)
        elif src[i] == '"' and _raw_prefix(src, i):
            found.raw_strings = True
            i = _raw_literal(src, out, i, fill, found)
        elif src[i] in "\"'" and not _digit_separator(src, i):
            i = _quoted_literal(src, out, i, fill, keep_include_paths, found)
        else:
            i += 1
    found.code = "".join(out)
    return found


def _line_comment_end(src: str, i: int) -> int:
    n = len(src)
    while i < n and src[i] != "\n":
        if src[i] == "\\" and i + 1 < n and src[i + 1] == "\n":
            i += 1  # a continued // comment runs on to the next line
        i += 1
    return i


def _blank_to(out: list[str], start: int, end: int) -> int:
    for k in range(start, end):
        if out[k] != "\n":
            out[k] = " "
    return end


def _word_before(src: str, i: int) -> str:
    """The identifier or number characters just before ``i``."""
    j = i
    while j > 0 and (src[j - 1].isalnum() or src[j - 1] == "_"):
        j -= 1
    return src[j:i]


def _raw_prefix(src: str, i: int) -> bool:
    """``R"(``, ``LR"(``, ``uR"(``, ``UR"(`` or ``u8R"(`` opens a raw string literal."""
    return _word_before(src, i) in ("R", "LR", "uR", "UR", "u8R")


def _digit_separator(src: str, i: int) -> bool:
    """``1'000'000`` (C++14): a quote inside a number is not a char literal."""
    return src[i] == "'" and _word_before(src, i)[:1].isdigit()


def _raw_literal(src: str, out: list[str], i: int, fill: str, found: Shadow) -> int:
    match = _RAW_OPEN.match(src, i - 1)
    if match is None:
        found.problems.append("unterminated literal")
        return i + 1
    close = ")" + match.group(1) + '"'
    end = src.find(close, match.end())
    stop = len(src) if end < 0 else end
    if end < 0:
        found.problems.append("unterminated literal")
    for k in range(match.end(), stop):
        if out[k] != "\n":
            out[k] = fill
    return stop + len(close)


def _quoted_literal(src: str, out: list[str], i: int, fill: str, keep_include: bool,
                    found: Shadow) -> int:
    quote, j, n = src[i], i + 1, len(src)
    while j < n and src[j] != quote:
        if src[j] == "\n":
            found.problems.append("unterminated literal")
            return j
        j += 2 if src[j] == "\\" else 1
    if j >= n:
        found.problems.append("unterminated literal")
        return n
    line_start = src.rfind("\n", 0, i) + 1
    if not (keep_include and quote == '"' and _INCLUDE_BEFORE.search(src[line_start:i])):
        for k in range(i + 1, j):
            out[k] = fill
    return j + 1
