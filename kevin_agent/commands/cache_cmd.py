"""``kevin cache``: where the build cache is and what fills it; ``kevin cache clear`` empties it.

The cache (``KEVIN_BUILD_CACHE``, else ``~/.cache/kevin-agent/build``) holds the compiled
candidates, the shared precompiled torch headers (one per toolchain: clearing collects those of
toolchains no longer used), the measured baselines and torch.compile's caches. Its cap
(``cache_max_gb``) is kept by every evaluator as it starts, least recently used builds and headers first.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("exit codes: 0 done; 2 bad input (a bad cache_max_gb). Clear it only while no run or "
                     "evaluation is in progress: the next build makes the shared header again (minutes).")
    parser.add_argument("action", nargs="?", choices=["show", "clear"], default="show", metavar="ACTION",
                        help="show (default): the place, the size of each part and the cap; clear: empty it "
                             "(show|clear)")


def human(size: int) -> str:
    """1234567 -> "1.2 MB" (decimal units, as `du -h --si`)."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def show_lines(root: object, sizes: list[tuple[str, int]], cap: int) -> list[str]:
    """What ``kevin cache`` prints: the place, each part's size, the total and the cap."""
    width = max(len(label) for label, _ in sizes)
    total = sum(size for _, size in sizes)
    lines = [f"build cache: {root}"]
    lines += [f"  {label.ljust(width)}  {human(size):>9}" for label, size in sizes]
    lines.append(f"  {'total'.ljust(width)}  {human(total):>9} (cap {human(cap)}: cache_max_gb in [tool.kevin] or "
                 "KEVIN_CACHE_MAX_GB; past it, least recently used builds and headers are removed)")
    return lines


def run(args: argparse.Namespace) -> int:
    from kevin_agent.config import cache_max_bytes
    from kevin_agent.evaluate.build.cache import default_cache_root
    from kevin_agent.evaluate.build.usage import clear, part_sizes

    root = default_cache_root()
    cap = cache_max_bytes()
    if not root.is_dir():
        print(f"build cache: {root} (empty: nothing built yet)")
        return 0
    if args.action == "clear":
        freed = clear(root)
        print(f"cleared the build cache {root}: {human(freed)} freed (the next build makes the shared torch "
              "header again)")
        return 0
    for line in show_lines(root, part_sizes(root), cap):
        print(line)
    return 0
