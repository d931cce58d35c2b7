"""Cut CUDA/C++ source text into top-level chunks and say what each chunk is.

A chunk is a preprocessor directive (with its line continuations, or a whole top-level
``#if ... #endif`` block of directives) or one top-level declaration/definition. Comments and
string/char literals are blanked in a same-length shadow text (``code``) so braces and keywords
inside them never mislead the scanner. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kevin_agent.evaluate.source.clex import shadow


class SplitRefused(Exception):
    """The source cannot be split safely; the message says why (the build takes the whole path)."""


TORCH_USE = re.compile(
    r"\b(?:torch|at|c10|caffe2|pybind11|py)\s*::|\bTensor\b|\bTORCH_\w+|\bAT_\w+|\bC10_\w+"
    r"|\bdata_ptr\b|\bIntArrayRef\b|\bPYBIND11_\w+|\bnamespace\s+(?:torch|at|c10)\b"
)
DEVICE_MARK = re.compile(r"\b(?:__global__|__device__|__constant__|__shared__|__managed__)\b")
DEVICE_BODY = re.compile(
    r"\b(?:threadIdx|blockIdx|blockDim|gridDim|warpSize|__syncthreads\w*|__shfl\w*|atomic[A-Z]\w*"
    r"|__ldg|__syncwarp|__activemask|__ballot_sync|__any_sync|__all_sync)\b"
)
IDENT = re.compile(r"[A-Za-z_]\w*")
TYPE_HEAD = re.compile(r"^\s*(?:template\s*<[^{;]*>\s*)?(?:typedef\s+)?(?:struct|class|union|enum)\b")
ODR_SAFE = re.compile(r"\b(?:static|inline|__forceinline__|constexpr|const|template)\b")
TORCH_HEADER = re.compile(r"#\s*include\s*[<\"](?:torch|ATen|c10|pybind11|caffe2|THC)/")
DEVICE_HEADER = re.compile(r"#\s*include\s*[<\"]"
                           r"(?:cub/|thrust/|cooperative_groups|mma\.h|cuda/|cute/|cutlass/|[^>\"]*\.cuh)")


@dataclass
class Chunk:
    """One top-level piece of the source; ``line`` is the 1-based line where ``text`` starts."""

    text: str
    code: str  # same text with comments and literal contents blanked
    line: int
    preprocessor: bool
    kind: str = ""
    name: str | None = None  # the function / type / variable / macro it defines
    defines: set[str] = field(default_factory=set)
    uses: set[str] = field(default_factory=set)


def blank_comments_and_literals(src: str) -> str:
    """Same-length copy of ``src`` with comments as spaces and literal contents as ``_``
    (``source.clex``); SplitRefused for raw string literals and unterminated text."""
    lexed = shadow(src)
    if lexed.raw_strings:
        raise SplitRefused("raw string literal")
    if lexed.problems:
        raise SplitRefused(lexed.problems[0])
    return lexed.code


def _directive_end(code: str, i: int) -> int:
    """Index just past the newline ending the directive that starts at ``i``."""
    n = len(code)
    while i < n:
        if code[i] == "\\" and i + 1 < n and code[i + 1] == "\n":
            i += 2
            continue
        if code[i] == "\n":
            return i + 1
        i += 1
    return n


def _at_line_start(code: str, i: int) -> bool:
    j = i - 1
    while j >= 0 and code[j] in " \t":
        j -= 1
    return j < 0 or code[j] == "\n"


def raw_chunks(src: str) -> list[Chunk]:
    """Top-level chunks of ``src`` in order (empty ones dropped)."""
    code = blank_comments_and_literals(src)
    chunks: list[Chunk] = []
    n, i, start, depth = len(code), 0, 0, 0
    brace_at = -1  # where the current chunk's first top-level '{' is
    lines = [0, 1]  # [offset counted to, line number there]: counted on, never from the start again

    def emit(end: int, preprocessor: bool) -> None:
        text = code[start:end]
        lead = len(text) - len(text.lstrip())
        if text.strip():
            s = start + lead
            lines[1] += code.count("\n", lines[0], s)
            lines[0] = s
            chunks.append(Chunk(src[s:end], code[s:end], lines[1], preprocessor))

    while i < n:
        c = code[i]
        if c == "#" and depth == 0 and _at_line_start(code, i):
            if code[start:i].strip():
                raise SplitRefused("preprocessor line inside a top-level declaration")
            end = _directive_end(code, i)
            start = i
            emit(end, True)
            i = start = end
            continue
        if c in "{([":
            if c == "{" and depth == 0 and brace_at < 0:
                brace_at = i
            depth += 1
        elif c in "})]":
            depth -= 1
            if depth < 0:
                raise SplitRefused("unbalanced brackets")
            if c == "}" and depth == 0 and not _needs_semicolon(code[start:brace_at]):
                emit(i + 1, False)
                start, brace_at = i + 1, -1
        elif c == ";" and depth == 0:
            emit(i + 1, False)
            start, brace_at = i + 1, -1
        i += 1
    if depth != 0:
        raise SplitRefused("unbalanced brackets")
    if code[start:].strip():
        raise SplitRefused("source ends inside a declaration")
    return _group_conditionals(chunks)


def _needs_semicolon(head: str) -> bool:
    """A ``{...}`` that does not end its declaration: type bodies and braced initialisers."""
    if TYPE_HEAD.match(head):
        return True
    if "operator" in head:
        return False
    depth = 0
    for k, ch in enumerate(head):
        if ch in "(<":
            depth += 1
        elif ch in ")>":
            depth = max(0, depth - 1)
        elif ch == "=" and depth == 0 and head[k + 1 : k + 2] != "=" and head[k - 1 : k] not in ("=", "!", "<", ">"):
            return True
    return False


def _group_conditionals(chunks: list[Chunk]) -> list[Chunk]:
    """Fold each top-level ``#if ... #endif`` block of directives into one chunk."""
    out: list[Chunk] = []
    block: list[Chunk] = []
    depth = 0
    for chunk in chunks:
        word = re.match(r"#\s*(\w+)", chunk.code.strip()) if chunk.preprocessor else None
        directive = word.group(1) if word else ""
        if directive.startswith("if"):
            depth += 1
        if depth:
            if not chunk.preprocessor:
                raise SplitRefused("code inside a top-level #if block")
            block.append(chunk)
        else:
            out.append(chunk)
        if directive == "endif" and depth:
            depth -= 1
            if depth == 0:
                first = block[0]
                gap_text = "".join(c.text if c.text.endswith("\n") else c.text + "\n" for c in block)
                gap_code = "".join(c.code if c.code.endswith("\n") else c.code + "\n" for c in block)
                out.append(Chunk(gap_text, gap_code, first.line, True))
                block = []
    if depth:
        raise SplitRefused("unterminated #if block")
    return out
