"""The VS Code extension's own unit tests (editors/vscode/src/test/*.test.ts: finding `kevin` in
the workspace's .venv before PATH, the kevin.baseUrl setting and its old name), compiled with the
extension's locked TypeScript into a temporary folder and run by node's test runner.

Needs what scripts/test.sh installs (`npm ci` in editors/vscode); anything missing fails the test
with the step to run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

EXTENSION = Path(__file__).resolve().parents[1] / "editors" / "vscode"
TSC = EXTENSION / "node_modules" / ".bin" / "tsc"


def test_the_extensions_unit_tests_pass(tmp_path: Path) -> None:
    assert shutil.which("node"), "Node.js 20 (`node` on PATH) is needed"
    assert TSC.is_file(), "the extension's node_modules: cd editors/vscode && npm ci"
    built = subprocess.run([str(TSC), "-p", str(EXTENSION), "--outDir", str(tmp_path)], capture_output=True,
                           text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    tests = sorted((tmp_path / "test").glob("*.test.js"))
    assert tests, "no compiled tests"
    ran = subprocess.run(["node", "--test", *map(str, tests)], capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert "# fail 0" in ran.stdout and "# pass 4" in ran.stdout, ran.stdout[-2000:]
