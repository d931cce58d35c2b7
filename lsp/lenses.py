"""Code lenses above nn.Module classes: write a kernel, the state of a run, an accepted kernel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

from lsprotocol import types

from kevin_agent.accept import AcceptedKernel
from kevin_agent.lsp.runs import RunState
from kevin_agent.task import ModuleClass

OPTIMIZE, CANCEL, ACCEPT, SHOW_DIFF, DISCARD, OPEN_KERNEL = (
    "kevin.optimize", "kevin.cancel", "kevin.accept", "kevin.showDiff", "kevin.discard",
    "kevin.openKernel",
)
INFO = ""  # a lens that only shows text (no command to run)


def _lens(line: int, title: str, command: str, *arguments: object) -> types.CodeLens:
    return types.CodeLens(
        range=types.Range(types.Position(line, 0), types.Position(line, 0)),
        command=types.Command(title=title, command=command, arguments=list(arguments)),
    )


def unavailable_reason(module: Optional[ModuleClass], syntax_error: Optional[str]) -> Optional[str]:
    """Why no kernel can be written for the class now (the code action's disabled reason and the
    lens's text agree): the buffer does not parse, or the class has no example inputs."""
    if syntax_error is not None:
        return f"fix the syntax error first: {syntax_error}"
    if module is not None and not module.has_inputs:
        return module.missing_inputs or "no example inputs"
    return None


def lenses_for_class(
    uri: str, module: ModuleClass, run: Optional[RunState], accepted: Optional[AcceptedKernel],
    syntax_error: Optional[str] = None,
) -> list[types.CodeLens]:
    """The lenses of one class, from its run (if any) and its accepted kernel (if any); a text-only
    lens with the reason when no kernel can be written for it now."""
    line, name = module.start_line - 1, module.name
    if run is not None and run.active:
        return [_lens(line, run.summary(), INFO), _lens(line, "cancel", CANCEL, uri, name)]
    if run is not None and run.best is not None and run.status in ("done", "cancelled"):
        return [
            _lens(line, f"Kevin: {run.best_speedup:.2f}x vs eager ready: accept & commit", ACCEPT, uri, name),
            _lens(line, "show diff", SHOW_DIFF, uri, name),
            _lens(line, "discard", DISCARD, uri, name),
        ]
    if accepted is not None:
        versus = (f", {accepted.speedup_vs_compile:.2f}x vs torch.compile"
                  if accepted.speedup_vs_compile is not None else "")
        kernel = str(accepted.kernel_path)
        return [
            _lens(line, f"Kevin: {accepted.speedup_vs_eager:.2f}x vs eager{versus} on {accepted.gpu}",
                  OPEN_KERNEL, kernel),
            _lens(line, "re-run", OPTIMIZE, uri, name),
            _lens(line, "open kernel", OPEN_KERNEL, kernel),
        ]
    reason = unavailable_reason(module, syntax_error)
    if reason is not None:  # disabled, as the code action is: text only, with the reason
        return [_lens(line, f"Kevin: write CUDA kernel (unavailable: {reason})", INFO)]
    return [_lens(line, "Kevin: write CUDA kernel", OPTIMIZE, uri, name)]


def code_lenses(
    uri: str,
    classes: tuple[ModuleClass, ...],
    run_of: Callable[[str], Optional[RunState]],
    accepted_of: Callable[[str], Optional[AcceptedKernel]],
    syntax_error: Optional[str] = None,
) -> list[types.CodeLens]:
    """Lenses for every class of a buffer (its last good classes while it does not parse)."""
    found: list[types.CodeLens] = []
    for module in classes:
        found.extend(lenses_for_class(uri, module, run_of(module.name), accepted_of(module.name),
                                      syntax_error))
    return found
