"""Which code of a preprocessed translation unit is the candidate's, and what it does there.

A compiler's ``-E`` output carries line markers: ``# N "file" 1`` when an ``#include`` enters a
file, ``# N "file" 2`` when it returns, and bare ``# N "file"`` for a ``#line`` directive. Text
of files entered from an absolute path (the toolchain's, torch's, CUDA's and the system's
headers) is foreign; the rest (the generated translation unit, whose text is the candidate's
sources and our launchers, and anything it includes by a relative name) is the candidate's own.
A ``#line`` never changes that: only an include does. The candidate could forge a marker with its
own ``# N "file" 1`` line, so sources holding line directives are refused before this runs
(``line_directives``).

In the own text: every ``__global__`` function *defined* there (``__global__`` is
``__attribute__((global))`` once preprocessed, so macros cannot hide it), by qualified name; and
every ``asm`` statement outside device code (a ``__global__`` or ``__device__``-only function:
inline PTX stays allowed there). The host pass of the preprocessor is what is read, so code
under ``#ifdef __CUDA_ARCH__`` (device only) is not in it. Standard library only; linear in the
text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kevin_agent.evaluate.source.clex import shadow

_MARKER = re.compile(r'#\s*(?:line\s+)?\d+\s+"((?:[^"\\]|\\.)*)"((?:\s+\d+)*)\s*$')
_TOKEN = re.compile(r'R"([^()\\\s]{0,16})\((?:.|\n)*?\)\1"|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\''
                    r"|[A-Za-z_]\w*|::|\S")
ASM_WORDS = frozenset({"asm", "__asm__", "__asm"})
ANON = "(anonymous namespace)"
MAX_FINDINGS = 64
# A line directive in the candidate's source: "#line", "# 12 ...", also spelled with the "%:" digraph.
_DIRECTIVE = re.compile(r"^[ \t]*(?:#|%:|\?\?=)[ \t]*(?:line\b|\d)", re.MULTILINE)


@dataclass
class TuFacts:
    """What one preprocessed own translation unit defines and does."""

    kernels: list[str] = field(default_factory=list)  # qualified names of the __global__ functions defined
    host_asm: list[str] = field(default_factory=list)  # "file:line" of inline assembly outside device code
    notes: list[str] = field(default_factory=list)


def line_directives(source: str) -> list[int]:
    """1-based lines of ``source`` that are ``#line`` or GNU line-marker directives (comments and
    literals blanked, continued lines joined, digraph and trigraph spellings included)."""
    joined = shadow(source, fill="_").code.replace("\\\n", "")  # continued lines joined (numbers shift)
    return [joined.count("\n", 0, m.start()) + 1 for m in _DIRECTIVE.finditer(joined)]


def own_lines(text: str) -> tuple[list[tuple[str, int, str]], list[str]]:
    """(file, line, text) of every line of the own files of preprocessed ``text``, and notes."""
    stack = [True]  # own? for the main file, then one entry per include entered
    out: list[tuple[str, int, str]] = []
    notes: list[str] = []
    file, line = "", 1
    for raw in text.split("\n"):
        if raw.startswith("#"):
            marker = _MARKER.match(raw)
            if marker:
                flags = marker.group(2).split()
                file, line = marker.group(1), int(re.search(r"\d+", raw).group(0))  # type: ignore[union-attr]
                if "1" in flags:
                    stack.append(stack[-1] and not file.startswith("/"))
                elif "2" in flags:
                    if len(stack) < 2:
                        notes.append("unbalanced line markers")
                        stack = [False]
                    else:
                        stack.pop()
                continue
            if raw.startswith("#pragma"):
                line += 1
                continue
        if stack[-1] and raw.strip():
            out.append((file, line, raw))
        line += 1
    return out, notes


def scan(text: str, device_code: bool = True) -> TuFacts:
    """The facts of one preprocessed translation unit (``-E`` output of the host pass).
    ``device_code``: nvcc's; a host compiler's (False) compiles every function for the host,
    ``__device__`` ones included, so any inline assembly there is host assembly."""
    lines, notes = own_lines(text)
    facts = TuFacts(notes=notes)
    _Scanner(facts, device_code).run(lines)
    return facts


class _Scanner:
    """Scopes of the own text: namespaces, types, function bodies (device or host), other braces."""

    def __init__(self, facts: TuFacts, device_code: bool = True) -> None:
        self.facts = facts
        self.device_code = device_code
        self.scopes: list[tuple[str, str]] = []  # (kind, name): ns | link | type | fn-device | fn-host | other
        self.head: list[str] = []

    def in_function(self) -> str | None:
        return next((kind for kind, _ in reversed(self.scopes) if kind.startswith("fn-")), None)

    def run(self, lines: list[tuple[str, int, str]]) -> None:
        for file, line, raw in lines:
            for match in _TOKEN.finditer(raw):
                self.token(match.group(0), f"{file}:{line}")

    def token(self, tok: str, where: str) -> None:
        if tok in ASM_WORDS and self.in_function() != "fn-device" and len(self.facts.host_asm) < MAX_FINDINGS:
            self.facts.host_asm.append(where)
        if tok == "{":
            self.scopes.append(self.opened())
            self.head = []
        elif tok == "}":
            if self.scopes:
                self.scopes.pop()
            self.head = []
        elif tok == ";":
            self.head = []
        else:
            self.head.append(tok)

    def opened(self) -> tuple[str, str]:
        """The kind of the scope a ``{`` opens after ``self.head``."""
        inside = self.in_function()
        if inside:
            return inside, ""
        head = _without_attributes(self.head)
        if "namespace" in head:
            names = [t for t in head[head.index("namespace") + 1:] if t != "::" and t != "inline"]
            return "ns", "::".join(names) or ANON
        if head[:1] == ["extern"] and len(head) == 2 and head[1].startswith('"'):
            return "link", ""
        if any(t in ("struct", "class", "union", "enum") for t in _before_paren(head)):
            return "type", ""
        if "(" not in head:
            return "other", ""
        attrs = _attribute_words(self.head)
        if "global" in attrs and self.device_code:
            self.kernel(head)
        device = self.device_code and ("global" in attrs or ("device" in attrs and "host" not in attrs))
        return ("fn-device" if device else "fn-host"), ""

    def kernel(self, head: list[str]) -> None:
        name = _declared_name(head)
        if name and len(self.facts.kernels) < 10_000:
            spaces = [n for kind, n in self.scopes if kind == "ns"]
            self.facts.kernels.append("::".join([*spaces, name]))


def _attribute_words(head: list[str]) -> set[str]:
    """The words inside ``__attribute__((...))`` groups of ``head``."""
    words: set[str] = set()
    i = 0
    while i < len(head):
        if head[i] in ("__attribute__", "__attribute"):
            end = _group_end(head, i + 1)
            words.update(t.strip("_") for t in head[i + 1:end] if t[:1].isalpha() or t[:1] == "_")
            i = end
        else:
            i += 1
    return words


def _without_attributes(head: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(head):
        if head[i] in ("__attribute__", "__attribute", "__declspec", "alignas", "decltype"):
            i = _group_end(head, i + 1)
        else:
            out.append(head[i])
            i += 1
    return out


def _group_end(tokens: list[str], start: int) -> int:
    """Index past the balanced parenthesised group starting at ``tokens[start]``."""
    if start >= len(tokens) or tokens[start] != "(":
        return start
    depth = 0
    for i in range(start, len(tokens)):
        depth += {"(": 1, ")": -1}.get(tokens[i], 0)
        if depth == 0:
            return i + 1
    return len(tokens)


def _before_paren(head: list[str]) -> list[str]:
    return head[: head.index("(")] if "(" in head else head


def _declared_name(head: list[str]) -> str | None:
    """The function name of a definition head: the identifier before its parameter list (after a
    leading ``template <...>``)."""
    i = 0
    if head[:2] == ["template", "<"]:
        depth = 0
        for i in range(1, len(head)):
            depth += {"<": 1, ">": -1}.get(head[i], 0)
            if depth == 0:
                break
        i += 1
    rest = head[i:]
    for k in range(1, len(rest)):
        if rest[k] == "(" and re.match(r"[A-Za-z_]\w*$", rest[k - 1]):
            return rest[k - 1]
    return None
