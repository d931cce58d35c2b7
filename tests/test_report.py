"""``kevin report``: the plotted data, a valid PNG, and the HTML page that embeds it."""

from __future__ import annotations

import base64
import re
import subprocess
import sys

import pytest
from loop_fixtures import stored_run
from PIL import Image

from kevin_agent.report import figure, report_data, write_report
from kevin_agent.run_table import conclude


def test_report_data_is_best_so_far_per_trajectory_with_reference_lines(tmp_path):
    record = stored_run(tmp_path).load_run("run-1")
    data = report_data(record)
    assert data.turns == [0, 1, 2]
    # trajectory 0: wrong, slow 0.8x, quick 2.0x; trajectory 1: broken, suspicious 40x, wrong
    assert data.series == {0: [0.0, 0.8, 2.0], 1: [0.0, 0.0, 0.0]}
    assert data.eager_line == 1.0
    assert data.compile_line == pytest.approx(1.2 / 0.8)


def test_plot_numbers_turns_from_0_like_candidate_ids(tmp_path):
    data = report_data(stored_run(tmp_path).load_run("run-1"))
    axes = figure(data, "title").axes[0]
    assert list(axes.get_xticks()) == [0, 1, 2]  # t0.2 is plotted at turn 2, not 3
    xs = {tuple(line.get_xdata()) for line in axes.get_lines() if line.get_label().startswith("trajectory")}
    assert xs == {(0, 1, 2)}


def test_best_so_far_follows_forked_history(tmp_path):
    store = stored_run(tmp_path, {0: ["fastest", "wrong", "wrong"], 1: ["wrong", "wrong", "slow"]},
                       parents={"t1.1": "t0.0"})
    data = report_data(store.load_run("run-1"))
    assert data.series[1] == [0.0, 3.0, 3.0]  # trajectory 1 continued trajectory 0's 3.0x kernel


def test_report_files_png_and_html(tmp_path):
    record = stored_run(tmp_path).load_run("run-1")
    files = write_report(record, tmp_path / "out")
    with Image.open(files.png) as image:
        assert image.format == "PNG" and image.size == (800, 450)
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 10  # lines were drawn, not a blank canvas
    page = files.html.read_text()
    found = re.search(r'src="data:image/png;base64,([^"]+)"', page)
    assert found, "no embedded image"
    embedded = found.group(1)
    assert base64.b64decode(embedded) == files.png.read_bytes()
    table = page.split('<table id="candidates">')[1]
    rows = re.findall(r"<tr><td>(t\d\.\d)</td>", table)
    assert rows == ["t0.0", "t1.0", "t0.1", "t1.1", "t0.2", "t1.2"]
    assert conclude(record).text in page.replace("&#x27;", "'")


def test_report_cli(tmp_path):
    stored_run(tmp_path)
    out = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "kevin_agent", "report", "latest", "-o", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (out / "run-1.png").stat().st_size > 1000 and (out / "run-1.html").exists()
    missing = subprocess.run([sys.executable, "-m", "kevin_agent", "report", "zzz"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1


def test_report_into_a_place_that_cannot_be_written_is_one_line(tmp_path):
    stored_run(tmp_path)
    done = subprocess.run([sys.executable, "-m", "kevin_agent", "report", "latest", "-o", "/proc/kevin-reports"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "cannot write the report into /proc/kevin-reports" in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.strip().count("\n") == 0
