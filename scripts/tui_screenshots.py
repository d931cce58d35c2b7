"""Make the README screenshots of `kevin tui`: drive the app with Pilot on a demo repository
(scripted replies, replayed verdicts), save SVG screenshots, convert them to PNG with rsvg-convert.

    .venv/bin/python scripts/tui_screenshots.py [OUT_DIR]     # default docs/screenshots
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "tui")]

from tui_support import make_app, start_run, wait_for  # noqa: E402

SIZE = (100, 30)


async def capture(out: Path, work: Path) -> list[Path]:
    from kevin_agent.tui.screens.candidate import CandidateScreen
    from kevin_agent.tui.screens.diff import DiffScreen

    app, _, script = make_app(work)
    shots: list[Path] = []

    def save(name: str) -> None:
        shots.append(Path(app.save_screenshot(f"{name}.svg", path=str(out))))

    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: bool(getattr(app.screen, "entries", None)), what="modules")
        save("tui-browser")
        await start_run(pilot, script)
        await wait_for(pilot, lambda: app.screen.status == "done", what="run done")
        await pilot.press("down", "down")
        save("tui-run")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, CandidateScreen), what="details")
        app.screen.query_one("#candidate-tabs").active = "tab-cuda"
        await pilot.pause()
        save("tui-candidate")
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, DiffScreen), what="diff")
        save("tui-diff")
    return shots


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "screenshots"
    if shutil.which("rsvg-convert") is None:
        print("tui_screenshots: needs rsvg-convert (apt-get install librsvg2-bin)", file=sys.stderr)
        return 3
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        svgs = asyncio.run(capture(out, Path(work)))
    for svg in svgs:
        png = svg.with_suffix(".png")
        subprocess.run(["rsvg-convert", "--zoom", "1", str(svg), "-o", str(png)], check=True)
        svg.unlink()
        print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
