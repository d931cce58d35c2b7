"""Parse a Python file into top-level statements, fast enough for an editor's every keystroke.

The file is cut at top-level statement boundaries (a cheap line scan) and each piece is parsed on
its own and cached by its text, so after an edit only the edited piece is parsed again. A cut in
the wrong place (inside a string or brackets) leaves a piece that does not parse; the whole file
is then parsed in one go, which also gives the true syntax error. Line numbers of cached nodes are
relative to their piece; ``TopStatement`` turns them into file lines.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from kevin_agent.errors import UserInputError
from kevin_agent.task.names import StatementNames, statement_names, top_level_binds

_CONTINUATION = re.compile(r"(else|elif|except|finally)\b")
_NOT_A_START = frozenset(" \t\f#)]}")
_PIECE_CACHE_LIMIT = 8192
_FILE_CACHE_LIMIT = 64


@dataclass
class _Piece:
    """One parsed piece of a file; its nodes' line numbers start at 1 for the piece's first line."""

    module: ast.Module
    names: dict[int, StatementNames] = field(default_factory=dict)  # index in body -> names
    binds: dict[int, tuple[frozenset[str], bool]] = field(default_factory=dict)


@dataclass
class TopStatement:
    """A top-level statement and where it sits in the file."""

    node: ast.stmt
    base: int  # file line of the piece's first line (1-based)
    piece: _Piece
    index: int  # index in the piece's body
    main_guard: bool = False  # `if __name__ == "__main__":` block: never part of a task

    def line(self, relative: int) -> int:
        """File line (1-based) of a line number taken from a node of this statement."""
        return self.base + relative - 1

    @property
    def start_line(self) -> int:
        """First file line, decorators included."""
        decorators = getattr(self.node, "decorator_list", [])
        return self.line(min([self.node.lineno, *(d.lineno for d in decorators)]))

    @property
    def end_line(self) -> int:
        return self.line(self.node.end_lineno or self.node.lineno)

    @property
    def binds(self) -> frozenset[str]:
        """Module-level names this statement binds (none for a main guard)."""
        return frozenset() if self.main_guard else self._binds()[0]

    @property
    def star_import(self) -> bool:
        return self._binds()[1]

    def _binds(self) -> tuple[frozenset[str], bool]:
        cached = self.piece.binds.get(self.index)
        if cached is None:
            cached = self.piece.binds[self.index] = top_level_binds(self.node)
        return cached

    @property
    def names(self) -> StatementNames:
        cached = self.piece.names.get(self.index)
        if cached is None:
            cached = self.piece.names[self.index] = statement_names(self.node)
        return cached


@dataclass
class ParsedFile:
    """A file's normalised lines and its top-level statements, in order."""

    lines: list[str]  # without line endings
    statements: list[TopStatement]
    future_annotations: bool

    def text(self, first: int, last: int) -> str:
        """File lines first..last (1-based, inclusive) joined with newlines."""
        return "\n".join(self.lines[first - 1 : last])


_piece_cache: dict[str, _Piece] = {}
_file_cache: dict[str, ParsedFile] = {}


def parse_file(source: str, path: str = "<source>") -> ParsedFile:
    """Parse ``source``; raises UserInputError "path:line: syntax error: ..." when it does not parse."""
    cached = _file_cache.get(source)
    if cached is not None:
        return cached
    normalised = source.replace("\r\n", "\n").replace("\r", "\n").removeprefix("\ufeff")
    lines = normalised.split("\n")
    statements = _parse_pieces(lines)
    if statements is None:
        statements = _parse_whole(normalised, path)
    parsed = ParsedFile(lines, statements, _has_future_annotations(statements))
    if len(_file_cache) >= _FILE_CACHE_LIMIT:
        _file_cache.clear()
    _file_cache[source] = parsed
    return parsed


def _piece_starts(lines: list[str]) -> list[int]:
    """0-based lines where a top-level statement may begin (decorators stay with their def).

    Lines inside triple-quoted strings are skipped (a cheap scan; a wrong guess only costs a
    fallback to parsing the whole file).
    """
    starts = [0]
    in_decorators = False
    open_quote: str | None = None
    for number, line in enumerate(lines):
        inside_string = open_quote is not None
        if '"""' in line or "'''" in line:
            open_quote = _triple_quote_state(line, open_quote)
        if inside_string or not line or line[0] in _NOT_A_START or _CONTINUATION.match(line):
            continue
        if not in_decorators and number:
            starts.append(number)
        in_decorators = line[0] == "@"
    return starts


def _triple_quote_state(line: str, open_quote: str | None) -> str | None:
    """The triple quote still open at the end of ``line``, given the one open at its start."""
    position = 0
    while True:
        if open_quote is not None:
            end = line.find(open_quote, position)
            if end < 0:
                return open_quote
            position, open_quote = end + 3, None
            continue
        hits = [(line.find(q, position), q) for q in ('"""', "'''")]
        hits = [(at, q) for at, q in hits if at >= 0]
        if not hits:
            return None
        at, open_quote = min(hits)
        position = at + 3


def _parse_pieces(lines: list[str]) -> list[TopStatement] | None:
    starts = _piece_starts(lines)
    statements: list[TopStatement] = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        text = "\n".join(lines[start:end]) + "\n"
        piece = _piece_cache.get(text)
        if piece is None:
            try:
                piece = _Piece(ast.parse(text))
            except (SyntaxError, ValueError):
                return None
            if len(_piece_cache) >= _PIECE_CACHE_LIMIT:
                _piece_cache.clear()
            _piece_cache[text] = piece
        for index, node in enumerate(piece.module.body):
            statements.append(TopStatement(node, start + 1, piece, index, _is_main_guard(node)))
    return statements


def _parse_whole(source: str, path: str) -> list[TopStatement]:
    try:
        module = ast.parse(source)
    except SyntaxError as err:
        detail = err.msg or "invalid syntax"
        raise UserInputError(f"{path}:{err.lineno or 1}: syntax error: {detail}") from None
    except ValueError as err:  # e.g. null bytes
        raise UserInputError(f"{path}: cannot parse: {err}") from None
    piece = _Piece(module)
    return [
        TopStatement(node, 1, piece, index, _is_main_guard(node))
        for index, node in enumerate(module.body)
    ]


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    parts = [node.test.left, *node.test.comparators]
    names = {p.id for p in parts if isinstance(p, ast.Name)}
    constants = {p.value for p in parts if isinstance(p, ast.Constant)}
    return names == {"__name__"} and constants == {"__main__"}


def _has_future_annotations(statements: list[TopStatement]) -> bool:
    return any(
        isinstance(s.node, ast.ImportFrom)
        and s.node.module == "__future__"
        and any(alias.name == "annotations" for alias in s.node.names)
        for s in statements
    )
