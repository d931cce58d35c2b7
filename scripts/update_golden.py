#!/usr/bin/env python3
"""Rewrite the golden prompt files (tests/golden/*.txt) after a deliberate change to the prompts.

The tests only compare (tests/test_prompts.py never writes a golden file); this script is the one
way to update them, so a changed prompt shows up in `git diff tests/golden` for review.

    python scripts/update_golden.py              # rewrite tests/golden/, list what changed
    python scripts/update_golden.py --into DIR   # write them into DIR instead
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--into", type=Path, default=None, metavar="DIR", help="folder to write (default tests/golden)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(TESTS))
    from golden_prompts import GOLDEN, GOLDEN_TEXTS, write_golden

    folder = args.into or GOLDEN
    changed = write_golden(folder)
    for name in GOLDEN_TEXTS:
        print(f"{folder / name}: {'rewritten' if name in changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
