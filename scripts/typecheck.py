"""Run mypy over the folders [tool.mypy] names, with the module names the code really imports.

Plain `mypy` cannot check this tree: lsp/ and tui/ install as kevin_agent.lsp and kevin_agent.tui
(pyproject's package-dir), which mypy has no setting for, and each tests/ folder holds a conftest.py
(pytest imports each one on its own). This script takes mypy's own file list and options from
pyproject.toml, renames those modules, and runs the same check. Usage: python scripts/typecheck.py
[mypy options]. Exit status: mypy's (0 clean, 1 type errors, 2 bad usage or a blocking error).
"""

from __future__ import annotations

import os
import sys

from mypy import build
from mypy.errors import CompileError
from mypy.fscache import FileSystemCache
from mypy.main import process_options
from mypy.modulefinder import BuildSource

# The folders setuptools installs under another name (pyproject.toml, [tool.setuptools] package-dir).
INSTALLED_AS = {"lsp": "kevin_agent.lsp", "tui": "kevin_agent.tui"}


def module_name(source: BuildSource) -> str | None:
    """The name `source` is imported under: kevin_agent.lsp.* for lsp/*, a path-based name for conftest."""
    name = source.module
    head, _, rest = name.partition(".")
    if head in INSTALLED_AS and source.path and source.path.startswith(head + os.sep):
        return INSTALLED_AS[head] + ("." + rest if rest else "")
    if name == "conftest" and source.path:
        return os.path.splitext(os.path.normpath(source.path))[0].replace(os.sep, ".")
    return name


def main(argv: list[str]) -> int:
    fscache = FileSystemCache()
    sources, options = process_options(argv, fscache=fscache)
    renamed = [BuildSource(s.path, module_name(s), text=s.text, base_dir=s.base_dir, followed=s.followed)
               for s in sources]
    try:
        result = build.build(renamed, options, fscache=fscache)
        messages = result.errors
    except CompileError as e:
        print("\n".join(e.messages), file=sys.stderr)
        return 2
    for line in messages:
        print(line)
    files = len({m.split(":", 1)[0] for m in messages if ": error:" in m})
    errors = sum(": error:" in m for m in messages)
    if errors:
        print(f"Found {errors} errors in {files} files (checked {len(renamed)} source files)")
        return 1
    print(f"Success: no issues found in {len(renamed)} source files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
