"""The shape docs/architecture.md describes, checked: layers, no circles, process boundaries,
faces that only talk to the run service, small functions."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = {"kevin_agent": ROOT / "kevin_agent", "kevin_agent.lsp": ROOT / "lsp",
                "kevin_agent.tui": ROOT / "tui"}
MAX_FUNCTION_LINES = 60

# Lower layers never import higher ones (longest prefix decides a module's layer).
LAYERS: dict[str, int] = {
    # 0: data, errors and the small modules everything reads
    "kevin_agent.errors": 0, "kevin_agent.atomic": 0, "kevin_agent.data": 0, "kevin_agent.events": 0,
    "kevin_agent.verdict_records": 0, "kevin_agent.safe_text": 0,
    "kevin_agent.feedback": 0, "kevin_agent.prompt_example": 0, "kevin_agent.config": 0,
    "kevin_agent.run_record": 0, "kevin_agent.run_table": 0, "kevin_agent.verdict_text": 0,
    "kevin_agent.task": 0, "kevin_agent.store": 0, "kevin_agent.paths": 0, "kevin_agent.eval_modes": 0,
    # 1: what crosses process boundaries, and the model of a candidate's source
    "kevin_agent.evaluate.api": 1, "kevin_agent.evaluate.protocol": 1,
    "kevin_agent.evaluate.processes": 1, "kevin_agent.evaluate.source": 1,
    "kevin_agent.evaluate.judgement": 1, "kevin_agent.evaluate.judge_wire": 1,
    "kevin_agent.evaluate.observe.report": 1, "kevin_agent.evaluate.observe.wire": 1,
    "kevin_agent.evaluate.observe.channel": 1,
    "kevin_agent.backends.base": 1, "kevin_agent.tokens": 1, "kevin_agent.prompts": 1,
    "kevin_agent.parsing": 1,
    # 2: code by the process it runs in
    "kevin_agent.evaluate.static": 2, "kevin_agent.evaluate.build": 2, "kevin_agent.evaluate.worker": 2,
    "kevin_agent.evaluate.judge": 2, "kevin_agent.evaluate.observe": 2,
    "kevin_agent.evaluate.provenance": 1, "kevin_agent.evaluate.sandbox": 1,
    "kevin_agent.backends": 2,
    # 3: the parent-side evaluator
    "kevin_agent.evaluate": 3,
    # 4: the loop
    "kevin_agent.loop": 4,
    # 5: the run service and what works on stored runs
    "kevin_agent.runs": 5, "kevin_agent.accept": 5, "kevin_agent.benchmark": 5, "kevin_agent.report": 5,
    "kevin_agent.export": 5,
    "kevin_agent.progress": 5,
    # 6: the faces
    "kevin_agent.cli": 6, "kevin_agent.__main__": 6, "kevin_agent.commands": 6, "kevin_agent.lsp": 6,
    "kevin_agent.tui": 6,
}

# Code that runs in the evaluator's child processes: torch and the standard library only.
CHILD_SIDE = ("kevin_agent.evaluate.worker", "kevin_agent.evaluate.build", "kevin_agent.evaluate.source",
              "kevin_agent.evaluate.provenance", "kevin_agent.evaluate.sandbox",
              "kevin_agent.evaluate.static", "kevin_agent.evaluate.judge", "kevin_agent.evaluate.judge_wire",
              "kevin_agent.evaluate.judgement", "kevin_agent.evaluate.observe",
              "kevin_agent.evaluate.protocol", "kevin_agent.evaluate.processes", "kevin_agent.evaluate.api")
CHILD_MAY_IMPORT = ("kevin_agent.evaluate.worker", "kevin_agent.evaluate.build", "kevin_agent.evaluate.source",
                    "kevin_agent.evaluate.provenance", "kevin_agent.evaluate.sandbox",
                    "kevin_agent.evaluate.static", "kevin_agent.evaluate.protocol", "kevin_agent.evaluate.processes",
                    "kevin_agent.evaluate.api", "kevin_agent.evaluate.judge_wire", "kevin_agent.evaluate.judgement",
                    "kevin_agent.evaluate.observe",
                    "kevin_agent.data", "kevin_agent.verdict_records",
                    "kevin_agent.safe_text", "kevin_agent.feedback",
                    "kevin_agent.errors", "kevin_agent.atomic", "kevin_agent.paths", "kevin_agent.eval_modes")
THIRD_PARTY_ALLOWED = {"torch", "ninja"}


def _modules() -> dict[str, Path]:
    found = {}
    for prefix, folder in PACKAGE_DIRS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if prefix == "kevin_agent" and parts and parts[0] in ("lsp", "tui"):
                continue
            found[".".join([prefix, *parts])] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module name imported anywhere in the file (function-level imports included)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


GRAPH = {name: {r for r in map(_resolve, _imports(name, path)) if r and r != name and not name.startswith(r + ".")}
         for name, path in MODULES.items()}


def _layer(name: str) -> int:
    best = max((p for p in LAYERS if name == p or name.startswith(p + ".")), key=len)
    return LAYERS[best]


def test_every_module_has_a_layer():
    missing = [name for name in MODULES if not any(name == p or name.startswith(p + ".") for p in LAYERS)
               and name != "kevin_agent"]
    assert missing == []


def test_no_import_runs_up_a_layer():
    upward = sorted(f"{a} ({_layer(a)}) -> {b} ({_layer(b)})" for a, targets in GRAPH.items()
                    if a != "kevin_agent" for b in targets if b != "kevin_agent" and _layer(b) > _layer(a))
    assert upward == []


def test_no_import_circles():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    try:
        for node in GRAPH:
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)  # later tests rely on the default (deep-nesting attacks)
    assert circles == []


def test_child_side_code_needs_only_torch_and_the_standard_library():
    wrong = []
    for name, path in MODULES.items():
        if not name.startswith(CHILD_SIDE):
            continue
        for imported in _imports(name, path):
            top = imported.split(".")[0]
            if imported.startswith("kevin_agent"):
                target = _resolve(imported)
                if target and not target.startswith(CHILD_MAY_IMPORT) and target != "kevin_agent":
                    wrong.append(f"{name} -> {target}")
            elif top and top not in sys.stdlib_module_names and top not in THIRD_PARTY_ALLOWED:
                wrong.append(f"{name} -> {imported}")
    assert wrong == []


@pytest.mark.parametrize("face", ["kevin_agent.lsp", "kevin_agent.tui", "kevin_agent.commands"])
def test_faces_reach_runs_only_through_the_run_service(face):
    forbidden = ("kevin_agent.loop", "kevin_agent.backends", "kevin_agent.evaluate")
    # `kevin eval` judges one candidate, `kevin doctor` checks the host, `kevin cache` looks after the
    # build cache: none plays a run
    allowed = {"kevin_agent.commands.eval_cmd", "kevin_agent.commands.doctor_cmd", "kevin_agent.commands.cache_cmd"}
    wrong = sorted(f"{a} -> {b}" for a, targets in GRAPH.items() if a.startswith(face) and a not in allowed
                   for b in targets if b.startswith(forbidden))
    assert wrong == []


def test_the_core_never_imports_a_face():
    """Only the command line (`kevin lsp`, `kevin tui`) starts a face; nothing below uses one."""
    faces = ("kevin_agent.lsp", "kevin_agent.tui")
    wrong = sorted(f"{a} -> {b}" for a, targets in GRAPH.items()
                   if a != "kevin_agent" and _layer(a) < LAYERS["kevin_agent.cli"]
                   for b in targets if b.startswith(faces))
    assert wrong == []


def test_no_function_is_longer_than_sixty_lines():
    long = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {length} lines")
    assert long == []
