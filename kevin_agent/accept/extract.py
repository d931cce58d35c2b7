"""Find the ``load_inline`` calls of a candidate and pull their C++/CUDA sources out as text.

A source is extracted when its value folds to constants (``source.consts``) over literals and
module-level names bound once; arguments are matched to parameters by torch's signature
(``source.calls``). Anything else (strings built at run time) keeps the call inline, with the
reason recorded.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Optional

from kevin_agent.errors import UserInputError
from kevin_agent.evaluate.source.calls import bind_arguments, is_load_inline_call
from kevin_agent.evaluate.source.consts import ConstEval, NotStatic

# load_inline keywords that only shape how the sources are written (consumed when extracting)
_CONSUMED = ("name", "cpp_sources", "cuda_sources", "functions", "with_pytorch_error_handling",
             "no_implicit_headers")
# load_inline keywords that torch.utils.cpp_extension.load accepts as well
LOAD_KEYWORDS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths",
                 "with_cuda", "is_python_module", "keep_intermediates")
# dropped: the build goes to the user's default extension cache, quietly
_DROPPED = ("build_directory", "verbose", "use_pch")


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
        start = self.line_starts[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]  # stmt or expr
        end = self.line_starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]  # stmt or expr
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
    """Folds argument expressions over the module's once-bound constants (``source.consts``),
    remembering which names each value came from (their bindings may move into kernel files)."""

    def __init__(self, bindings: dict[str, ast.stmt]) -> None:
        self.env: dict[str, Any] = {}
        for name, stmt in sorted(bindings.items(), key=lambda item: item[1].lineno):
            try:
                self.env[name] = ConstEval(self.env)(stmt.value)  # type: ignore[attr-defined]  # an assignment
            except (NotStatic, TypeError, ValueError, KeyError, IndexError):
                continue
        self.used: set[str] = set()

    def _value(self, node: ast.expr) -> Any:
        evaluate = ConstEval(self.env)
        try:
            value = evaluate(node)
        except (NotStatic, TypeError, ValueError, KeyError, IndexError):
            return None
        self.used |= evaluate.used
        return value

    def strings(self, node: ast.expr) -> Optional[list[str]]:
        """A str or a list/tuple of str (load_inline accepts both)."""
        value = self._value(node)
        if isinstance(value, str):
            return [value]
        if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
            return list(value)
        return None

    def functions(self, node: ast.expr) -> Optional[dict[str, str]]:
        value = self._value(node)
        if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            return dict(value)
        if isinstance(value, str):
            return {value: value}
        if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
            return {name: name for name in value}
        return None


def _flag(node: Optional[ast.expr], default: bool) -> Optional[bool]:
    if node is None:
        return default
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return node.value
    return None


def _describe(call: ast.Call, source: CandidateSource, bindings: dict[str, ast.stmt]) -> ExtensionCall:
    found = ExtensionCall(call=source.span(call), func=source.span(call.func))
    try:
        args = bind_arguments(call)
    except NotStatic:
        found.inline_reason = "its arguments are passed with * or **"
        return found
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
