"""CPU checks that stop GPU-test rot (issue 17): every module under tests/gpu imports here, every
``kevin_agent`` name those modules import (at the top, inside fixtures and tests, and inside the
code strings they hand to child processes) exists, and so does every one the fixture files import
(scripts GPU tests launch, such as the stale sandbox stand-in worker that imported
``kevin_agent.evaluate.gpu_stages`` long after it moved), every fixture their tests request is
defined, and every GPU test runs under a bounded per-test timeout.

A rename that never ran on a GPU (``from kevin_agent.evaluate.build import BuildCache`` after the
class moved to ``build.cache``) fails here, on a machine without a GPU.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
GPU = TESTS / "gpu"
GPU_MODULES = sorted(GPU.glob("*.py"))
FIXTURE_FILES = sorted((TESTS / "fixtures").rglob("*.py"))
# "from kevin_agent.x import a, b" inside a string of code (a child process's program)
CODE_IMPORT = re.compile(r"^\s*from\s+(kevin_agent[\w.]*)\s+import\s+\(?([\w ,]+)\)?\s*$", re.MULTILINE)
TIMEOUT_CAP_S = 400  # no single GPU test may eat most of a 9-minute session part (scripts/gpu_session.sh)


def _strings(tree: ast.AST) -> list[str]:
    """Every string constant, f-strings joined with their placeholders blanked."""
    found = []
    parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts:
            found.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            found.append("".join(str(v.value) if isinstance(v, ast.Constant) else "X" for v in node.values))
    return found


def kevin_imports(source: str) -> list[tuple[str, str | None, int]]:
    """(module, name or None, line) for every kevin_agent import in ``source``: import statements
    anywhere (module level, fixtures, test bodies) and ``from kevin_agent... import`` lines in strings."""
    tree = ast.parse(source)
    found: list[tuple[str, str | None, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "kevin_agent":
            found += [(node.module, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == "kevin_agent"]
    for text in _strings(tree):
        for match in CODE_IMPORT.finditer(text):
            names = [n.strip() for n in match.group(2).split(",") if n.strip()]
            found += [(match.group(1), name, 0) for name in names]
    return found


def unresolved(imports: list[tuple[str, str | None, int]]) -> list[str]:
    """The imports that fail: a missing module, or a name the module does not define."""
    problems = []
    for module, name, line in imports:
        where = f"line {line}" if line else "in a code string"
        try:
            loaded = importlib.import_module(module)
        except ImportError as err:
            problems.append(f"{where}: import {module}: {err}")
            continue
        if name is not None and not hasattr(loaded, name):
            try:  # a submodule imported by name ("from pkg import submodule")
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                problems.append(f"{where}: cannot import name {name!r} from {module!r}")
    return problems


def test_the_resolver_catches_a_moved_name() -> None:
    """The rename that broke tests/gpu/test_sandbox_gpu.py, in a fixture body and in a code string."""
    fixture = "def cache():\n    from kevin_agent.evaluate.build import BuildCache, compile_many\n"
    assert len(unresolved(kevin_imports(fixture))) == 2
    in_string = 'CODE = f"""\nimport os\nfrom kevin_agent.evaluate.build import BuildCache\nx = {1}\n"""\n'
    assert unresolved(kevin_imports(in_string)) == ["in a code string: cannot import name 'BuildCache' "
                                                    "from 'kevin_agent.evaluate.build'"]
    good = "def cache():\n    from kevin_agent.evaluate.build.cache import BuildCache\n"
    assert kevin_imports(good) and unresolved(kevin_imports(good)) == []
    assert unresolved([("kevin_agent.evaluate.nonexistent", None, 3)])[0].startswith("line 3: import ")
    stale_worker = "import kevin_agent.evaluate.gpu_stages as gpu_stages\n"  # the sandbox stand-in's
    assert unresolved(kevin_imports(stale_worker))[0].startswith("line 1: import kevin_agent.evaluate.gpu_stages")


@pytest.mark.parametrize("path", GPU_MODULES, ids=lambda p: p.name)
def test_gpu_module_names_resolve(path: Path) -> None:
    problems = unresolved(kevin_imports(path.read_text()))
    assert not problems, f"{path.relative_to(TESTS.parent)}: " + "; ".join(problems)


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: str(p.relative_to(TESTS / "fixtures")))
def test_fixture_file_names_resolve(path: Path) -> None:
    problems = unresolved(kevin_imports(path.read_text()))
    assert not problems, f"{path.relative_to(TESTS.parent)}: " + "; ".join(problems)


@pytest.mark.parametrize("path", GPU_MODULES, ids=lambda p: p.name)
def test_gpu_module_imports(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(GPU))
    monkeypatch.syspath_prepend(str(TESTS))
    importlib.import_module(path.stem)


COLLECT = """
import json, sys
import pytest

class Check:
    def __init__(self):
        self.rows = []

    @pytest.hookimpl(tryfirst=True)  # before tests/conftest.py deselects GPU tests on a machine without one
    def pytest_collection_modifyitems(self, items):
        for item in items:
            info = item._fixtureinfo
            params = set(getattr(getattr(item, "callspec", None), "params", {}))
            missing = [n for n in info.names_closure if n not in info.name2fixturedefs and n not in params
                       and n != "request"]
            mark = item.get_closest_marker("timeout")
            self.rows.append({"id": item.nodeid, "missing": missing, "gpu": item.get_closest_marker("gpu") is not None,
                              "timeout": mark.args[0] if mark and mark.args else None})

check = Check()
code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", sys.argv[1]], plugins=[check])
print("ROWS:" + json.dumps(check.rows))
sys.exit(0 if code in (0, 5) else int(code))  # 5: all deselected afterwards (no GPU here)
"""


@pytest.fixture(scope="module")
def collected() -> list[dict]:
    """Every test of tests/gpu as pytest collects it (no GPU needed): its missing fixtures, its
    gpu mark and its timeout mark (the GPU conftest gives each test one)."""
    done = subprocess.run([sys.executable, "-c", COLLECT, str(GPU)], cwd=TESTS.parent, capture_output=True,
                          text=True, timeout=300)
    rows = [line for line in done.stdout.splitlines() if line.startswith("ROWS:")]
    assert done.returncode == 0 and rows, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(rows[0][5:])


def test_every_gpu_test_finds_its_fixtures(collected: list[dict]) -> None:
    assert len(collected) > 50  # the whole GPU suite was collected, not an empty directory
    missing = {row["id"]: row["missing"] for row in collected if row["missing"]}
    assert not missing, missing


def test_every_gpu_test_is_marked_gpu_and_has_a_bounded_timeout(collected: list[dict]) -> None:
    unmarked = [row["id"] for row in collected if not row["gpu"]]
    assert not unmarked, unmarked
    unbounded = {row["id"]: row["timeout"] for row in collected
                 if not isinstance(row["timeout"], (int, float)) or not 0 < row["timeout"] <= TIMEOUT_CAP_S}
    assert not unbounded, unbounded


def test_every_gpu_test_module_runs_in_a_part_of_the_gpu_session() -> None:
    """scripts/gpu_session.sh runs the GPU suite in parts: a module listed in none never runs there
    (tests/gpu/test_attacks_gpu.py was, when it was new)."""
    script = (TESTS.parent / "scripts" / "gpu_session.sh").read_text()
    parts = script[script.index('case "$PART" in'):script.index("esac")]
    listed = set(re.findall(r"tests/gpu/(test_\w+\.py)", parts))
    modules = {path.name for path in GPU_MODULES if path.name.startswith("test_")}
    assert modules - listed == set(), f"in no part of scripts/gpu_session.sh: {sorted(modules - listed)}"
    assert listed - modules == set(), f"listed but missing: {sorted(listed - modules)}"
