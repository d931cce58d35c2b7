"""Code actions inside an nn.Module class: write a kernel (refactor.rewrite), add example inputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from lsprotocol import types

from kevin_agent.errors import UserInputError
from kevin_agent.lsp.documents import Scan, class_name_near, enclosing
from kevin_agent.lsp.lenses import OPTIMIZE, unavailable_reason
from kevin_agent.task import ModuleClass, input_stub


def rewrite_title(name: str) -> str:
    return f"Kevin: write a CUDA kernel for {name}"


def quick_fix_title(name: str) -> str:
    return f"Add example inputs for {name}"


def _rewrite(uri: str, name: str, disabled: Optional[str]) -> types.CodeAction:
    return types.CodeAction(
        title=rewrite_title(name),
        kind=types.CodeActionKind.RefactorRewrite,
        command=types.Command(title=rewrite_title(name), command=OPTIMIZE, arguments=[uri, name]),
        disabled=types.CodeActionDisabled(reason=disabled) if disabled else None,
    )


def stub_edit(source: str, class_name: str) -> tuple[types.Position, str]:
    """Where and what the quick fix inserts (UserInputError when the class cannot take a stub)."""
    line, text = input_stub(source, class_name)
    lines = source.splitlines(keepends=True)
    if line < len(lines):
        return types.Position(line, 0), text
    if lines and not lines[-1].endswith(("\n", "\r")):  # the class ends on the unterminated last line
        return types.Position(len(lines) - 1, len(lines[-1])), "\n" + text
    return types.Position(len(lines), 0), text


def _quick_fix(uri: str, source: str, module: ModuleClass) -> Optional[types.CodeAction]:
    try:
        position, text = stub_edit(source, module.name)
    except UserInputError:
        return None
    edit = types.TextEdit(range=types.Range(position, position), new_text=text)
    return types.CodeAction(
        title=quick_fix_title(module.name),
        kind=types.CodeActionKind.QuickFix,
        edit=types.WorkspaceEdit(changes={uri: [edit]}),
        is_preferred=True,
    )


def code_actions(
    uri: str, source: str, scan: Scan, line: int, busy: Optional[str] = None,
    disabled_support: bool = True,
) -> list[types.CodeAction]:
    """The actions at 0-based ``line``; ``busy`` is why a run cannot start now (one is going on)."""
    found: list[types.CodeAction] = []
    if scan.syntax_error is not None:
        name = class_name_near(source, line)
        module = enclosing(scan.classes, line)
        name = module.name if module is not None else name
        if name is not None and disabled_support:
            found.append(_rewrite(uri, name, unavailable_reason(None, scan.syntax_error)))
        return found
    module = enclosing(scan.classes, line)
    if module is None:
        return found
    reason = busy or unavailable_reason(module, None)
    if reason is None or disabled_support:
        found.append(_rewrite(uri, module.name, reason))
    if not module.has_inputs:
        fix = _quick_fix(uri, source, module)
        if fix is not None:
            found.append(fix)
    return found


def busy_reason(states: Sequence[Any], scan: Scan, line: int) -> Optional[str]:
    """Why no run can start for the class at 0-based ``line``: one is queued or running."""
    module = enclosing(scan.classes, line)
    if module is None:
        return None
    for state in states:
        if state.active and state.class_name == module.name:
            return f"a Kevin run for {state.class_name} is already {state.status}"
    return None


def only_kinds(actions: list[types.CodeAction], only: Optional[Sequence[Any]]) -> list[types.CodeAction]:
    """The actions whose kind falls under one of ``only`` (the client's filter), all without one."""
    if not only:
        return actions
    wanted = [getattr(kind, "value", kind) for kind in only]
    return [a for a in actions
            if a.kind is not None and any(str(getattr(a.kind, "value", a.kind)).startswith(k) for k in wanted)]
