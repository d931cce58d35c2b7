"""Find the ``load_inline`` calls of a candidate and pull their C++/CUDA sources out as text.

A source is extracted when it is a plain string literal, a list of them, a ``+`` of them, or a
module-level name bound once to one of those. Anything else (f-strings, strings built at run time,
positional arguments past ``cuda_sources``) keeps the call inline, with the reason recorded.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Optional

from kevin_agent.errors import UserInputError
from kevin_agent.evaluate.source.calls import is_load_inline_call

# load_inline keywords that only shape how the sources are written (consumed when extracting)
_CONSUMED = ("name", "cpp_sources", "cuda_sources", "functions", "with_pytorch_error_handling",
             "no_implicit_headers")
# load_inline keywords that torch.utils.cpp_extension.load accepts as well
LOAD_KEYWORDS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths",
                 "with_cuda", "is_python_module", "keep_intermediates")
# dropped: the build goes to the user's default extension cache, quietly
_DROPPED = ("build_directory", "verbose", "use_pch")
_POSITIONAL = ("name", "cpp_sources", "cuda_sources")


@dataclass(frozen=True)
class Span:
    """Byte offsets [start, end) into the UTF-8 encoded candidate."""

    start: int
    end: int


@dataclass
class ExtensionCall:
    """One ``load_inline(...)`` call of the candidate."""

    call: Span
    func: Span  # the ``load_inline`` / ``cpp_extension.load_inline`` callee
    cpp_source: Optional[str] = None  # joined like load_inline joins them; None: not extracted
    cuda_source: Optional[str] = None
    functions: Optional[dict[str, str]] = None
    error_handling: bool = True
    implicit_headers: bool = True
    load_kwargs: dict[str, str] = field(default_factory=dict)  # keyword -> expression source text
    inline_reason: Optional[str] = None  # why the sources stay inline; None when extracted
    used_names: dict[str, str] = field(default_factory=dict)  # name -> "cpp" | "cuda" | "functions"
    arg_spans: list[Span] = field(default_factory=list)  # consumed arguments (names inside vanish)

    @property
    def extracted(self) -> bool:
        return self.inline_reason is None


@dataclass
class CandidateSource:
    """The parsed candidate: its text, tree and byte offsets of each line."""

    code: str
    tree: ast.Module
    data: bytes
    line_starts: list[int]

    @classmethod
    def parse(cls, code: str) -> CandidateSource:
        try:
            tree = ast.parse(code)
        except SyntaxError as err:
            raise UserInputError(f"the candidate does not parse: line {err.lineno}: {err.msg}") from None
        data = code.encode("utf-8")
        starts = [0]
        for index, byte in enumerate(data):
            if byte == 0x0A:
                starts.append(index + 1)
        return cls(code, tree, data, starts)

    def span(self, node: ast.AST) -> Span:
        start = self.line_starts[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]
        end = self.line_starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
        return Span(start, end)

    def text(self, span: Span) -> str:
        return self.data[span.start:span.end].decode("utf-8")


def module_bindings(tree: ast.Module) -> dict[str, ast.stmt]:
    """Module-level names assigned exactly once (``NAME = value``), with their statement."""
    seen: dict[str, int] = {}
    statements: dict[str, ast.stmt] = {}
    for stmt in tree.body:
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            targets = list(stmt.targets)
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            targets = [stmt.target]
        for target in targets:
            for node in ast.walk(target):
                if isinstance(node, ast.Name):
                    seen[node.id] = seen.get(node.id, 0) + 1
                    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and target is node:
                        statements[node.id] = stmt
    return {name: stmt for name, stmt in statements.items() if seen.get(name) == 1}


class _Resolver:
    """Evaluates string-valued expressions made of literals and once-bound module names."""

    def __init__(self, bindings: dict[str, ast.stmt]) -> None:
        self.bindings = bindings
        self.used: set[str] = set()

    def string(self, node: ast.expr, depth: int = 0) -> Optional[str]:
        if depth > 20:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.string(node.left, depth + 1), self.string(node.right, depth + 1)
            return None if left is None or right is None else left + right
        if isinstance(node, ast.Name):
            stmt = self.bindings.get(node.id)
            if isinstance(stmt, ast.Assign):
                value = self.string(stmt.value, depth + 1)
                if value is not None:
                    self.used.add(node.id)
                return value
        return None

    def strings(self, node: ast.expr) -> Optional[list[str]]:
        """A str or a list/tuple of str (load_inline accepts both)."""
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self.string(item) for item in node.elts]
            return None if any(item is None for item in items) else items  # type: ignore[misc]
        if isinstance(node, ast.Name):
            stmt = self.bindings.get(node.id)
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, (ast.List, ast.Tuple)):
                items = self.strings(stmt.value)
                if items is not None:
                    self.used.add(node.id)
                return items
        single = self.string(node)
        return None if single is None else [single]

    def functions(self, node: ast.expr) -> Optional[dict[str, str]]:
        if isinstance(node, ast.Dict):
            keys = [self.string(k) if k is not None else None for k in node.keys]
            values = [self.string(v) for v in node.values]
            if any(k is None for k in keys) or any(v is None for v in values):
                return None
            return dict(zip(keys, values))  # type: ignore[arg-type]
        names = self.strings(node)
        return None if names is None else {name: name for name in names}


def _flag(node: Optional[ast.expr], default: bool) -> Optional[bool]:
    if node is None:
        return default
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return node.value
    return None


def _describe(call: ast.Call, source: CandidateSource, bindings: dict[str, ast.stmt]) -> ExtensionCall:
    found = ExtensionCall(call=source.span(call), func=source.span(call.func))
    if len(call.args) > len(_POSITIONAL) or any(k.arg is None for k in call.keywords):
        found.inline_reason = "its arguments are passed positionally past cuda_sources or with **"
        return found
    args: dict[str, ast.expr] = dict(zip(_POSITIONAL, call.args))
    args.update({k.arg: k.value for k in call.keywords if k.arg is not None})
    unknown = sorted(set(args) - set(_CONSUMED) - set(LOAD_KEYWORDS) - set(_DROPPED))
    if unknown:
        found.inline_reason = f"it passes {', '.join(unknown)}, which the file-based build does not take"
        return found
    resolver = _Resolver(bindings)
    cpp = resolver.strings(args["cpp_sources"]) if "cpp_sources" in args else []
    cpp_names = set(resolver.used)
    cuda = resolver.strings(args["cuda_sources"]) if "cuda_sources" in args else []
    cuda_names = set(resolver.used) - cpp_names
    functions: Optional[dict[str, str]] = None
    if "functions" in args and not (
        isinstance(args["functions"], ast.Constant) and args["functions"].value is None
    ):
        functions = resolver.functions(args["functions"])
        if functions is None:
            found.inline_reason = "its functions= list is computed, not a literal"
            return found
    function_names = set(resolver.used) - cpp_names - cuda_names
    error_handling = _flag(args.get("with_pytorch_error_handling"), True)
    implicit = _flag(args.get("no_implicit_headers"), False)
    if cpp is None or cuda is None:
        found.inline_reason = "its sources are built at run time, not plain string literals"
        return found
    if error_handling is None or implicit is None:
        found.inline_reason = "its with_pytorch_error_handling/no_implicit_headers flags are computed"
        return found
    found.cpp_source = "\n".join(cpp)
    found.cuda_source = "\n".join(cuda) if cuda else None
    found.functions = functions
    found.error_handling = error_handling
    found.implicit_headers = not implicit
    found.load_kwargs = {key: source.text(source.span(args[key])) for key in LOAD_KEYWORDS if key in args}
    found.used_names = {
        **{name: "functions" for name in function_names},
        **{name: "cuda" for name in cuda_names},
        **{name: "cpp" for name in cpp_names},
    }
    found.arg_spans = [source.span(args[key]) for key in _CONSUMED if key in args]
    return found


def find_extension_calls(source: CandidateSource) -> list[ExtensionCall]:
    """Every ``load_inline`` call of the candidate, in source order."""
    bindings = module_bindings(source.tree)
    calls = [node for node in ast.walk(source.tree) if isinstance(node, ast.Call) and is_load_inline_call(node)]
    calls.sort(key=lambda node: (node.lineno, node.col_offset))
    return [_describe(call, source, bindings) for call in calls]


def removable_bindings(source: CandidateSource, calls: list[ExtensionCall]) -> dict[str, ast.stmt]:
    """Module-level source strings whose every use moved into a kernel file (safe to drop)."""
    bindings = module_bindings(source.tree)
    candidates = {name for call in calls if call.extracted for name in call.used_names}
    consumed = [span for call in calls if call.extracted for span in call.arg_spans]
    removed: dict[str, ast.stmt] = {}
    changed = True
    while changed:
        changed = False
        dead = consumed + [source.span(stmt) for stmt in removed.values()]
        for name in sorted(candidates - set(removed)):
            stmt = bindings.get(name)
            if stmt is None or not _whole_lines(source, stmt):
                continue
            live = [
                node for node in ast.walk(source.tree)
                if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
                and not _inside(source.span(node), dead)
            ]
            if not live:
                removed[name] = stmt
                changed = True
    return removed


def _inside(span: Span, spans: list[Span]) -> bool:
    return any(outer.start <= span.start and span.end <= outer.end for outer in spans)


def _whole_lines(source: CandidateSource, stmt: ast.stmt) -> bool:
    """The statement is alone on its lines (nothing but blanks or a comment around it)."""
    span = source.span(stmt)
    line_start = source.line_starts[stmt.lineno - 1]
    before = source.data[line_start:span.start]
    after_end = source.data.find(b"\n", span.end)
    after = source.data[span.end: len(source.data) if after_end < 0 else after_end]
    return not before.strip() and (not after.strip() or after.strip().startswith(b"#"))
