"""Find the load_inline calls of a candidate without running it in this process.

First statically (AST: literals, names bound to literals, ``+``, implicit concatenation,
``.format`` / f-strings / ``%`` on constants, lists and tuples of those). When an argument is
computed at run time, the candidate's top level runs in a child process (CPU only, no secrets in
its environment, time-limited, killable) with load_inline replaced by a recorder.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
from typing import Any

from kevin_agent.evaluate.source.calls import SPEC_FIELDS, ExtensionSpec, is_load_inline_call, spec_from_call
from kevin_agent.evaluate.processes import kill_group, scrubbed_environment
from kevin_agent.evaluate.protocol import RecordReply

class NotStatic(Exception):
    """An argument could not be evaluated without running the candidate."""


class SourceExtractionError(Exception):
    """The candidate's load_inline arguments could not be found (message is for the model)."""


class _ConstEval:
    """Evaluates expressions built only from constants and names bound to constants."""

    def __init__(self, env: dict[str, Any]) -> None:
        self.env = env

    def __call__(self, node: ast.AST) -> Any:
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise NotStatic(type(node).__name__)
        return method(node)

    def _Constant(self, node: ast.Constant) -> Any:
        return node.value

    def _Name(self, node: ast.Name) -> Any:
        if node.id in self.env:
            return self.env[node.id]
        raise NotStatic(node.id)

    def _List(self, node: ast.List) -> Any:
        return [self(e) for e in node.elts]

    def _Tuple(self, node: ast.Tuple) -> Any:
        return tuple(self(e) for e in node.elts)

    def _Dict(self, node: ast.Dict) -> Any:
        if any(k is None for k in node.keys):
            raise NotStatic("dict unpacking")
        return {self(k): self(v) for k, v in zip(node.keys, node.values)}  # type: ignore[arg-type]

    def _BinOp(self, node: ast.BinOp) -> Any:
        left, right = self(node.left), self(node.right)
        if isinstance(node.op, ast.Add) and type(left) is type(right) and isinstance(left, (str, list, tuple, int)):
            return left + right
        if isinstance(node.op, ast.Mod) and isinstance(left, str):
            return left % right
        if isinstance(node.op, ast.Mult) and isinstance(left, (str, list, int)) and isinstance(right, int):
            return left * right
        raise NotStatic("operator")

    def _JoinedStr(self, node: ast.JoinedStr) -> Any:
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue) and value.format_spec is None and value.conversion == -1:
                inner = self(value.value)
                if not isinstance(inner, (str, int)):
                    raise NotStatic("f-string value")
                parts.append(str(inner))
            else:
                raise NotStatic("f-string format")
        return "".join(parts)

    def _Call(self, node: ast.Call) -> Any:
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr not in ("format", "join"):
            raise NotStatic("call")
        base = self(func.value)
        if not isinstance(base, str):
            raise NotStatic("call on non-string")
        args = [self(a) for a in node.args]
        if func.attr == "join" and len(args) == 1 and not node.keywords:
            return base.join(args[0])
        kwargs = {k.arg: self(k.value) for k in node.keywords if k.arg}
        if func.attr == "format" and all(isinstance(v, (str, int, float)) for v in [*args, *kwargs.values()]):
            return base.format(*args, **kwargs)
        raise NotStatic("format arguments")


def _bind_assignments(body: list[ast.stmt], env: dict[str, Any]) -> None:
    """Record simple ``NAME = <constant expression>`` bindings of a block, in order."""
    evaluate = _ConstEval(env)
    for stmt in body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            targets = [stmt.target]
            value = ast.BinOp(left=ast.Name(id=stmt.target.id, ctx=ast.Load()), op=stmt.op, right=stmt.value)
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    env[target.id] = evaluate(value)  # type: ignore[arg-type]
                except (NotStatic, TypeError, ValueError, KeyError, IndexError):
                    env.pop(target.id, None)  # rebinding to something dynamic hides the old value


def _enclosing_functions(tree: ast.Module) -> dict[ast.Call, list[ast.AST]]:
    """Map each load_inline call to the function definitions enclosing it (outermost first)."""
    found: dict[ast.Call, list[ast.AST]] = {}

    def visit(node: ast.AST, stack: list[ast.AST]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call) and is_load_inline_call(child):
                found[child] = list(stack)
            inner = stack + [child] if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else stack
            visit(child, inner)

    visit(tree, [])
    return found


def extract_static(code: str) -> list[ExtensionSpec]:
    """Specs of every load_inline call, in source order. Raises NotStatic or SyntaxError."""
    tree = ast.parse(code)
    module_env: dict[str, Any] = {}
    _bind_assignments(tree.body, module_env)
    calls = sorted(_enclosing_functions(tree).items(), key=lambda item: (item[0].lineno, item[0].col_offset))
    specs = []
    for call, functions in calls:
        env = dict(module_env)
        for function in functions:
            _bind_assignments(function.body, env)  # type: ignore[attr-defined]
        evaluate = _ConstEval(env)
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            raise NotStatic("*args or **kwargs")
        order = _parameter_order()
        args = [evaluate(a) if order[i] in SPEC_FIELDS else None for i, a in enumerate(call.args)]
        kwargs = {k.arg: evaluate(k.value) for k in call.keywords if k.arg in SPEC_FIELDS}
        try:
            specs.append(spec_from_call(args, kwargs, order))
        except (ValueError, TypeError) as exc:
            raise NotStatic(str(exc)) from exc
    return specs


def _parameter_order() -> tuple[str, ...]:
    from kevin_agent.evaluate.source.calls import load_inline_parameter_order

    return load_inline_parameter_order()


def child_environment() -> dict[str, str]:
    """The environment for candidate code: no secrets (the GPU worker's scrubbing), no GPU."""
    env = scrubbed_environment()
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def record_in_child(code: str, timeout_s: float = 120.0) -> list[ExtensionSpec]:
    """Run the candidate's top level in a CPU-only child with load_inline recording its arguments."""
    with tempfile.TemporaryDirectory(prefix="kevin-record-") as scratch:
        path = os.path.join(scratch, "candidate.py")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(code)
        proc = subprocess.Popen(
            [sys.executable, "-m", "kevin_agent.evaluate.worker.record", path],
            cwd=scratch, env=child_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            kill_group(proc)  # the whole group: the candidate may have spawned
            proc.communicate()
            raise SourceExtractionError(
                f"the module's top level did not finish within {timeout_s:.0f} s while looking for load_inline"
            ) from exc
        finally:
            kill_group(proc)  # nothing the candidate started outlives the recording
    for reply in RecordReply.from_output(stdout):
        try:
            specs = [ExtensionSpec.from_dict(raw) for raw in reply.specs]
        except (ValueError, KeyError, TypeError):
            continue  # not our recorder's line (the candidate printed the marker itself)
        if specs:
            return specs
        if reply.error:
            raise SourceExtractionError(f"running the module's top level raised: {reply.error}")
    if proc.returncode != 0 and not stdout.strip():
        tail = stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise SourceExtractionError(f"running the module's top level failed: {tail[0]}")
    raise SourceExtractionError("no load_inline call found (the module must call load_inline when imported)")


def extract_specs(code: str, timeout_s: float = 120.0) -> tuple[list[ExtensionSpec], str]:
    """All load_inline specs of a candidate and how they were found ("static" or "child")."""
    if "load_inline" not in code:
        raise SourceExtractionError("no load_inline call found (compile your CUDA code with load_inline)")
    try:
        specs = extract_static(code)
        if specs:
            return specs, "static"
    except SyntaxError as exc:
        raise SourceExtractionError(f"syntax error at line {exc.lineno}: {exc.msg}") from exc
    except NotStatic:
        pass
    return record_in_child(code, timeout_s), "child"
