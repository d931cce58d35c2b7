"""Units under the TUI: module discovery, setup defaults and settings, the plot, the command."""

from __future__ import annotations

import pytest
from tui_support import NO_INPUTS

from kevin_agent.cli import main
from kevin_agent.errors import UserInputError
from kevin_agent.runs.service import RunService
from kevin_agent.tui.discovery import scan_modules
from kevin_agent.tui.run_setup import SetupValues, default_values, run_request
from kevin_agent.tui.widgets import best_so_far


def test_scan_skips_environments_and_broken_files(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(NO_INPUTS)
    for skipped in (".venv/lib", "node_modules/x", ".kevin", "lib/site-packages/torch"):
        (tmp_path / skipped).mkdir(parents=True)
        (tmp_path / skipped / "m.py").write_text(NO_INPUTS)
    (tmp_path / "broken.py").write_text("class Broken(nn.Module:\n")
    (tmp_path / "side_effect.py").write_text(
        "import pathlib\npathlib.Path('ran').write_text('x')\nimport torch.nn as nn\n"
        "class A(nn.Module):\n    pass\n")
    found = [(e.label, e.module.name, e.module.has_inputs) for e in scan_modules(tmp_path)]
    assert found == [("pkg/m.py", "Doubler", False), ("side_effect.py", "A", False)]
    assert not (tmp_path / "ran").exists()  # files are read, never executed


def test_setup_defaults_come_from_the_project_config(tmp_path):
    (tmp_path / "kevin.toml").write_text('backend = "openai"\nbase_url = "http://gpu-box:9000/v1"\n'
                                         'model = "my/kevin"\n')
    service = RunService(environ={})
    values = default_values(service, tmp_path)
    assert (values.backend, values.endpoint, values.model) == ("openai", "http://gpu-box:9000/v1",
                                                               "my/kevin")
    request = run_request(SetupValues(backend="openai", endpoint=values.endpoint, model="m2",
                                      trajectories="3", turns="2", target_speedup="1.5"), tmp_path)
    settings = service.new_settings(request)
    assert (settings.trajectories, settings.turns, settings.target_speedup) == (3, 2, 1.5)
    assert settings.backend.base_url == "http://gpu-box:9000/v1" and settings.backend.model == "m2"


@pytest.mark.parametrize("field, value, message", [
    ("trajectories", "0", "at least 1"), ("turns", "x", "whole number"),
    ("target_speedup", "-1", "positive"), ("endpoint", "ftp://x", "http"),
])
def test_setup_rejects_bad_fields_with_one_line(tmp_path, field, value, message):
    values = SetupValues(backend="openai")
    setattr(values, field, value)
    with pytest.raises(UserInputError, match=message):
        RunService(environ={}).new_settings(run_request(values, tmp_path))


def test_best_so_far_is_a_running_maximum_per_trajectory():
    series = best_so_far({0: {0: 0.0, 1: 2.0, 2: 1.0}, 1: {0: 0.8}}, turns=3)
    assert series == {0: [0.0, 2.0, 2.0], 1: [0.8, None, None]}


def test_kevin_tui_on_a_missing_path_is_a_one_line_error(capsys):
    assert main(["tui", "/no/such/folder"]) == 2
    assert capsys.readouterr().err.strip() == "kevin tui: /no/such/folder: no such file or folder"


def test_plot_and_progress_number_turns_from_0_like_candidate_ids():
    from kevin_agent.tui.widgets import RunProgress, SpeedupPlot

    plot = SpeedupPlot(turns=3)
    plot.set_point(0, 0, 0.5)
    plot.set_point(0, 2, 2.0)
    lines = plot.render().plain.splitlines()
    assert lines[1].split() == ["0", "1", "2", "turn"]  # the axis: turns 0, 1, 2
    assert lines[2].startswith("t0") and lines[2].rstrip().endswith("2.00x")
    progress = RunProgress()
    progress.show("running", 2, 3, 1234, 0, 1)
    assert "turn 2 (0-2)" in str(progress.render()) and "3/3" not in str(progress.render())


def test_scan_marks_accepted_drop_ins_as_the_kernel_of_their_original(tmp_path):
    from kevin_agent.accept.names import ArtifactNames
    from kevin_agent.accept.render import Provenance, header

    (tmp_path / "block.py").write_text(NO_INPUTS.replace("Doubler", "Block"))
    names = ArtifactNames("Block", tmp_path)
    prov = Provenance("block.py::Block", "run-1", "t0.1", 2.0, 1.2, "NVIDIA H200")
    names.module_path.write_text(header(names, prov, ["block_kernel.cu"]) + "\n"
                                 + NO_INPUTS.replace("Doubler", "BlockCUDA"))
    # a class in another file that merely ends in CUDA is still a module to optimize
    (tmp_path / "other.py").write_text(NO_INPUTS.replace("Doubler", "MyCUDA"))
    found = {e.module.name: e.drop_in_of for e in scan_modules(tmp_path)}
    assert found == {"Block": None, "BlockCUDA": "block.py::Block", "MyCUDA": None}


ANSWER = NO_INPUTS.replace("class Doubler", "class ModelNew")


def test_the_browser_offers_tasks_only(tmp_path):
    """Not test fixtures, test files, kevin's own folder, a virtual environment under any name, nor
    an answer file (one defining ModelNew, with the reference class it was written against)."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "block.py").write_text(NO_INPUTS.replace("Doubler", "Block"))
    (tmp_path / "models" / "block_answer.py").write_text(ANSWER + NO_INPUTS.replace("Doubler", "Model"))
    for folder in ("tests/fixtures/kernels", "test", "fixtures", ".kevin/runs", "myenv/lib/python3.11"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "m.py").write_text(NO_INPUTS.replace("Doubler", "NotATask"))
    (tmp_path / "myenv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    for name in ("test_block.py", "block_test.py", "conftest.py"):
        (tmp_path / "models" / name).write_text(NO_INPUTS.replace("Doubler", "TestDouble"))
    (tmp_path / "models" / "testing_helpers.py").write_text(NO_INPUTS.replace("Doubler", "Helper"))
    found = [(e.label, e.module.name) for e in scan_modules(tmp_path)]
    assert found == [("models/block.py", "Block"), ("models/testing_helpers.py", "Helper")]


def test_a_folder_browsed_on_purpose_is_read_even_when_named_like_tests(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "model.py").write_text(NO_INPUTS)
    (tmp_path / "tests" / "answer.py").write_text(ANSWER)
    assert [e.module.name for e in scan_modules(tmp_path / "tests")] == ["Doubler"]
    assert scan_modules(tmp_path / "tests" / "answer.py") == []
