"""Tasks from user code: extraction, errors, example-input resolution, stubs, editor queries.

Every task source built here is also executed in a clean CPU interpreter (tests/task_runner.py):
it must build ``Model(*get_init_inputs())`` and run forward on ``get_inputs()``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kevin_agent.errors import UserInputError
from kevin_agent.task import find_module_classes, input_stub, load_task, task_from_source

FIXTURES = Path(__file__).parent / "fixtures" / "tasks"
RUNNER = Path(__file__).parent / "task_runner.py"


def fixture(name: str) -> str:
    return str(FIXTURES / name)


def apply_stub(source: str, class_name: str) -> str:
    line, text = input_stub(source, class_name)
    lines = source.splitlines(keepends=True)
    return "".join(lines[:line]) + text + "".join(lines[line:])


NAME_CLASH = """\
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.inner = Model()

    def forward(self, x):
        return self.inner(x) + 1

    @staticmethod
    def get_inputs():
        return [torch.ones(3, 5)]
"""

NO_TORCH_IMPORT = """\
from torch import nn


class Doubler(nn.Module):
    def forward(self, x, y):
        return x * 2 + y
"""

# id -> (how to build the task, expected output shape)
RUN_CASES: dict[str, tuple[str, list[int]]] = {
    "level1_matmul": ("kb_level1_matmul.py", [128, 64]),
    "level1_softmax": ("kb_level1_softmax.py", [16, 1024]),
    "level2_conv_relu_bias": ("kb_level2_conv_relu_bias.py", [16, 16, 30, 30]),
    "level3_residual_mlp": ("kb_level3_residual_mlp.py", [16, 10]),
    "several_encoder": ("several_modules.py::Encoder", [8, 32]),
    "several_decoder": ("several_modules.py::Decoder", [8, 48]),
    "static_inputs": ("static_inputs.py", [4, 10, 64]),
    "missing_imports": ("missing_imports.py", [16, 8, 96]),
    "helpers_constants": ("helpers_constants.py::NormAttention", [2, 16, 32]),
    "inheritance": ("inheritance.py", [4, 12, 24]),
    "dataclass_config": ("dataclass_config.py::FeedForward", [6, 32]),
    "stub_no_inputs": ("stub:no_inputs.py::MyBlock", [16, 64]),
    "stub_no_torch_import": ("stub-source:NO_TORCH_IMPORT::Doubler", [16, 64]),
    "name_clash": ("source:NAME_CLASH::Net", [3, 5]),
}


def build_case(how: str):
    if how.startswith("stub:"):
        file_name, _, class_name = how[len("stub:") :].partition("::")
        source = apply_stub(Path(fixture(file_name)).read_text(), class_name)
        return task_from_source(source, file_name, class_name)
    if how.startswith("stub-source:"):
        variable, _, class_name = how[len("stub-source:") :].partition("::")
        return task_from_source(apply_stub(globals()[variable], class_name), "buffer.py", class_name)
    if how.startswith("source:"):
        variable, _, class_name = how[len("source:") :].partition("::")
        return task_from_source(globals()[variable], "buffer.py", class_name)
    return load_task(fixture(how))


@pytest.fixture(scope="session")
def run_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Execute every RUN_CASES task (and the original missing_imports.py) in one clean process."""
    folder = tmp_path_factory.mktemp("task_runs")
    jobs = {case: {"source": build_case(how).source} for case, (how, _) in RUN_CASES.items()}
    jobs["original_missing_imports"] = {"import_path": fixture("missing_imports.py")}
    jobs_path, results_path = folder / "jobs.json", folder / "results.json"
    jobs_path.write_text(json.dumps(jobs))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    subprocess.run(
        [sys.executable, "-I", str(RUNNER), str(jobs_path), str(results_path)],
        cwd=folder, env=env, check=True, timeout=300,
    )
    return json.loads(results_path.read_text())


# --- produced tasks run and have the right shape --------------------------------------------------
@pytest.mark.parametrize("case", sorted(RUN_CASES))
def test_task_source_runs_on_cpu(case: str, run_results: dict[str, dict]) -> None:
    assert run_results[case] == {"shape": RUN_CASES[case][1]}


def test_original_file_with_missing_imports_does_not_import(run_results: dict[str, dict]) -> None:
    assert "ModuleNotFoundError" in run_results["original_missing_imports"]["error"]


# --- what a task carries ---------------------------------------------------------------------------
def test_unrelated_imports_and_broken_helpers_are_left_out() -> None:
    source = load_task(fixture("missing_imports.py")).source
    for absent in ("some_missing_heavy_pkg", "yet_another_missing_pkg", "another_missing_pkg",
                   "broken_unrelated_helper", "CONFIG", "__main__", "import os"):
        assert absent not in source
    assert "import torch\n" in source and "class Model(nn.Module):" in source


def test_helpers_and_constants_are_kept_transitively_in_order() -> None:
    task = load_task(fixture("helpers_constants.py"))
    source = task.source
    for needed in ("EPS = 1e-6", "NUM_HEADS = 4", "def rms_norm", "def _head_dim", "def split_heads",
                   "import torch.nn.functional as F"):
        assert needed in source
    for unneeded in ("plot_attention", "PLOT_STYLE", "unused_missing_plotting_lib"):
        assert unneeded not in source
    original = Path(fixture("helpers_constants.py")).read_text()
    kept = ["EPS = 1e-6", "def rms_norm", "def _head_dim", "def split_heads", "class ", "def get_inputs"]
    assert [source.index(k) for k in kept] == sorted(source.index(k) for k in kept)
    assert [original.index(k) for k in kept] == sorted(original.index(k) for k in kept)


def test_class_is_renamed_model_with_its_self_references() -> None:
    task = load_task(fixture("static_inputs.py"))
    assert task.class_name == "GatedMLP" and task.inputs_from == "static methods"
    assert "GatedMLP" not in task.source
    assert "super(Model, self).__init__()" in task.source
    assert "return [torch.randn(4, 10, Model.DEFAULT_DIM)]" in task.source
    assert "def get_inputs():\n    return Model.get_inputs()" in task.source


def test_inherited_base_class_is_carried_and_origin_is_the_class() -> None:
    task = load_task(fixture("inheritance.py"))
    assert task.class_name == "ScaledBlock"
    assert "class BaseBlock(nn.Module):" in task.source and "class Model(BaseBlock):" in task.source
    assert "super(Model, self).forward(x)" in task.source
    lines = Path(fixture("inheritance.py")).read_text().splitlines()
    assert task.origin is not None
    assert lines[task.origin.start_line - 1].startswith("class ScaledBlock(BaseBlock):")
    assert lines[task.origin.end_line - 1].strip() == "return x + self.scale * super(ScaledBlock, self).forward(x)"
    assert task.origin.path == os.path.abspath(fixture("inheritance.py"))


def test_dataclass_config_is_carried_but_unrelated_dataclass_is_not() -> None:
    source = load_task(fixture("dataclass_config.py::FeedForward")).source
    assert source.startswith("from __future__ import annotations\n")
    assert "class BlockConfig:" in source and "@dataclass" in source
    assert "TrainConfig" not in source and "heavy_training_framework" not in source


def test_name_clash_with_an_existing_model_class_moves_it_aside() -> None:
    source = task_from_source(NAME_CLASH, "buffer.py", "Net").source
    tree = ast.parse(source)
    classes = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
    assert classes == ["Model_", "Model"]
    assert "self.inner = Model_()" in source and "super(Model, self).__init__()" in source


def test_shared_line_statements_and_trimmed_imports() -> None:
    source = (
        "import torch, json\nimport torch.nn as nn\nWIDTH = 4; UNUSED = json.dumps({})\n"
        "class Scale(nn.Module):\n    def forward(self, x):\n        return x * WIDTH\n"
        "def get_inputs():\n    return [torch.ones(2)]\n"
    )
    built = task_from_source(source, "buffer.py", None).source
    assert "WIDTH = 4" in built and "UNUSED" not in built and "json" not in built
    assert "def get_init_inputs():\n    return []" in built


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("kb_level*.py")))
def test_kernelbench_files_are_already_tasks(name: str) -> None:
    """A KernelBench problem file comes back with the same syntax tree: nothing added or lost."""
    original = Path(fixture(name)).read_text()
    task = load_task(fixture(name))
    assert task.class_name == "Model" and task.inputs_from == "module functions"
    assert ast.dump(ast.parse(task.source)) == ast.dump(ast.parse(original))


def test_in_place_changes_of_kept_names_are_kept() -> None:
    source = (
        "import torch\nimport torch.nn as nn\nSIZES = [4]\nSIZES.append(8)\nCONFIG = {}\n"
        "CONFIG['scale'] = 3\ntorch.manual_seed(0)\nOTHER = []\nOTHER.append(1)\n"
        "class Net(nn.Module):\n    def forward(self, x):\n        return x.repeat(*SIZES) * CONFIG['scale']\n"
        "def get_inputs():\n    return [torch.ones(2, 1)]\n"
    )
    built = task_from_source(source, "net.py", None).source
    assert "SIZES.append(8)" in built and "CONFIG['scale'] = 3" in built
    assert "OTHER" not in built and "manual_seed" not in built


def test_windows_line_endings_and_byte_order_mark() -> None:
    source = "\ufeffimport torch\r\nimport torch.nn as nn\r\n\r\nclass Twice(nn.Module):\r\n" \
        "    def forward(self, x):\r\n        return super(Twice, self).forward(x) if False else 2 * x\r\n" \
        "def get_inputs():\r\n    return [torch.ones(2)]\r\n"
    task = task_from_source(source, "win.py", None)
    assert "\r" not in task.source and "super(Model, self)" in task.source
    assert task.origin is not None and (task.origin.start_line, task.origin.end_line) == (4, 6)


def test_scopes_local_names_do_not_pull_module_names_but_class_names_do_not_hide_them() -> None:
    local_only = (
        "import torch\nimport torch.nn as nn\nimport missing_pkg\nscale = missing_pkg.scale()\n"
        "class Local(nn.Module):\n    def forward(self, x):\n        scale = 2.0\n"
        "        ys = [scale for scale in range(2)]\n        f = lambda scale: scale\n"
        "        try:\n            pass\n        except ValueError as scale:\n            pass\n"
        "        return x * scale * f(len(ys))\n"
        "    @staticmethod\n    def get_inputs():\n        return [torch.ones(2)]\n"
    )
    assert "missing_pkg" not in task_from_source(local_only, "local.py", None).source
    class_attribute = (
        "import torch\nimport torch.nn as nn\nscale = 4.0\n"
        "class Attr(nn.Module):\n    scale = 3.0\n    def forward(self, x):\n        return x * scale\n"
        "    @staticmethod\n    def get_inputs():\n        return [torch.ones(2)]\n"
    )
    assert "scale = 4.0" in task_from_source(class_attribute, "attr.py", None).source


def test_star_import_kept_when_a_name_is_otherwise_unbound() -> None:
    source = (
        "from math import *\nimport torch\nimport torch.nn as nn\n"
        "class Root(nn.Module):\n    def forward(self, x):\n        return x * sqrt(2.0)\n"
        "    @staticmethod\n    def get_inputs():\n        return [torch.ones(2)]\n"
    )
    assert "from math import *" in task_from_source(source, "buffer.py", "Root").source


def test_module_level_inputs_ignored_when_several_candidates() -> None:
    modules = {m.name: m for m in find_module_classes(Path(fixture("several_modules.py")).read_text())}
    assert not modules["Critic"].has_inputs
    assert "count only in a file with one top-level module" in (modules["Critic"].missing_inputs or "")
    source = (
        "import torch\nimport torch.nn as nn\nclass A(nn.Module):\n    pass\n"
        "class B(nn.Module):\n    pass\ndef get_inputs():\n    return [torch.ones(1)]\n"
    )
    with pytest.raises(UserInputError, match=r"^A has no example inputs: add `@staticmethod def get_inputs\(\)`"):
        task_from_source(source, "two.py", "A")


@pytest.mark.parametrize("future", [False, True])
def test_names_used_only_in_annotations(future: bool) -> None:
    source = (
        ("from __future__ import annotations\n" if future else "")
        + "import torch\nimport torch.nn as nn\nfrom torch import Tensor\n"
        "class Ident(nn.Module):\n    def forward(self, x: Tensor) -> Tensor:\n        return x\n"
        "def get_inputs():\n    return [torch.ones(1)]\n"
    )
    built = task_from_source(source, "ann.py", None).source
    # evaluated at definition time without the future import, lazy strings with it
    assert ("from torch import Tensor" in built) is not future


def test_static_inputs_win_over_module_functions() -> None:
    source = (
        "import torch\nimport torch.nn as nn\n"
        "class Only(nn.Module):\n    def forward(self, x):\n        return x\n"
        "    @staticmethod\n    def get_inputs():\n        return [torch.ones(7)]\n"
        "def get_inputs():\n    return [torch.ones(1)]\n"
    )
    task = task_from_source(source, "buffer.py", None)
    assert task.inputs_from == "static methods"
    assert "torch.ones(1)" not in task.source and "return Model.get_inputs()" in task.source


def test_submodule_reached_through_a_helper_function_does_not_compete() -> None:
    source = (
        "import torch\nimport torch.nn as nn\n"
        "class Block(nn.Module):\n    def forward(self, x):\n        return x + 1\n"
        "def make_blocks(n):\n    return nn.Sequential(*[Block() for _ in range(n)])\n"
        "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.blocks = make_blocks(2)\n    def forward(self, x):\n        return self.blocks(x)\n"
        "def get_inputs():\n    return [torch.ones(2)]\n"
    )
    task = task_from_source(source, "net.py", None)
    assert task.class_name == "Net" and "def make_blocks" in task.source
    assert {m.name: m.used_by for m in find_module_classes(source)}["Block"] == ("Net",)


@pytest.mark.parametrize(
    "header, base, is_module",
    [
        ("import torch.nn as nn", "nn.Module", True),
        ("import torch", "torch.nn.Module", True),
        ("from torch.nn import Module", "Module", True),
        ("from torch import nn as tnn", "tnn.Module", True),
        ("import torch.nn as nn", "nn.Sequential", True),
        ("import torch.nn as nn", "nn.Parameter", False),
        ("from mylib import Module", "Module", False),
        ("import torch.nn as nn", "object", False),
    ],
)
def test_module_detection_by_base(header: str, base: str, is_module: bool) -> None:
    source = f"{header}\nclass Thing({base}):\n    pass\nclass Child(Thing):\n    pass\n"
    names = [m.name for m in find_module_classes(source)]
    assert names == (["Thing", "Child"] if is_module else [])


# --- errors: one line naming what to fix -----------------------------------------------------------
def error_of(spec: str) -> str:
    with pytest.raises(UserInputError) as caught:
        load_task(spec)
    message = str(caught.value)
    assert "\n" not in message and caught.value.exit_code == 2
    return message


def test_error_file_missing(tmp_path: Path) -> None:
    assert error_of(f"{tmp_path}/nope.py::Net") == f"{tmp_path}/nope.py: no such file"


def test_error_not_a_python_file(tmp_path: Path) -> None:
    (tmp_path / "model.txt").write_text("class A: pass\n")
    assert "not a .py file" in error_of(f"{tmp_path}/model.txt")
    (tmp_path / "net.py").write_text("class A: pass\n")
    folder = error_of(str(tmp_path))  # a folder: said plainly, with what to give instead
    assert "not a .py file" not in folder
    assert folder == (f"{tmp_path}: is a folder, not a Python file: give the module's file and class, "
                      f"e.g. {tmp_path}/net.py::ClassName (`kevin tui {tmp_path}` lists the nn.Module "
                      "classes under a folder)")


def test_error_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text("import torch\n\n\ndef ok():\n    return 1\n\nclass Broken(:\n    pass\n")
    assert error_of(str(path)).startswith(f"{path}:7: syntax error")


def test_error_class_missing_lists_modules() -> None:
    message = error_of(fixture("several_modules.py::Missing"))
    assert message.endswith("has no class Missing; its nn.Module classes: Encoder, Decoder, Critic")


def test_error_not_an_nn_module(tmp_path: Path) -> None:
    path = tmp_path / "plain.py"
    path.write_text("import torch.nn as nn\n\nclass Config:\n    pass\n\nclass Net(nn.Module):\n    pass\n")
    assert error_of(f"{path}::Config") == (
        f"{path}:3: class Config is not an nn.Module subclass (give it nn.Module as a base); "
        "its nn.Module classes: Net"
    )


def test_error_inputs_missing_says_what_to_add_and_where() -> None:
    path = fixture("no_inputs.py")
    assert error_of(path) == (
        "MyBlock has no example inputs: add `@staticmethod def get_inputs()` returning a list of "
        "input tensors (and `get_init_inputs()` for constructor arguments: dim, hidden) to class "
        f"MyBlock at {path}:5, or module-level get_inputs()/get_init_inputs()"
    )


def test_error_only_constructor_arguments_missing(tmp_path: Path) -> None:
    path = tmp_path / "half.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\nclass Half(nn.Module):\n"
        "    def __init__(self, dim):\n        super().__init__()\n\n"
        "    @staticmethod\n    def get_inputs():\n        return [torch.ones(2)]\n"
    )
    assert error_of(str(path)) == (
        "Half has no constructor arguments for its example inputs: add `@staticmethod def "
        f"get_init_inputs()` returning [dim] to class Half at {path}:4, or module-level "
        "get_inputs()/get_init_inputs()"
    )


def test_error_several_modules_without_class() -> None:
    path = fixture("several_modules.py")
    assert error_of(path) == (
        f"{path} holds several modules (Encoder, Decoder, Critic): pick one as {path}::Encoder"
    )


def test_error_no_module_at_all_and_empty_class(tmp_path: Path) -> None:
    path = tmp_path / "empty.py"
    path.write_text("x = 1\n")
    assert "defines no nn.Module subclass" in error_of(str(path))
    assert "name a class after '::'" in error_of(f"{path}::")


# --- input_stub ------------------------------------------------------------------------------------
def test_stub_round_trip_fills_signatures() -> None:
    source = Path(fixture("no_inputs.py")).read_text()
    line, text = input_stub(source, "MyBlock")
    assert line == len(source.splitlines())  # end of the class body = end of this file
    assert "        return [\n            torch.randn(16, 64),  # TODO: real shape of x\n" in text
    assert "0.1,  # dropout (its default)" in text and "# TODO: real value of dim" in text
    assert "mask" not in text  # forward's defaulted argument is left to its default
    task = task_from_source(apply_stub(source, "MyBlock"), "no_inputs.py", None)
    assert task.inputs_from == "static methods"


def test_stub_adds_only_what_is_missing_and_keeps_indentation() -> None:
    source = (
        "import torch\nimport torch.nn as nn\n\nclass Tabbed(nn.Module):\n"
        "\tdef __init__(self, width):\n\t\tsuper().__init__()\n\n"
        "\t@staticmethod\n\tdef get_inputs():\n\t\treturn [torch.ones(2)]\n\n"
        "class Spaced(nn.Module):\n    def __init__(self, width):\n        super().__init__()\n"
        "    @staticmethod\n    def get_inputs():\n        return [torch.ones(2)]\n"
    )
    line, text = input_stub(source, "Tabbed")
    assert line == 10 and "get_inputs" not in text
    assert text == (
        "\n\t@staticmethod\n\tdef get_init_inputs():\n\t\treturn [\n"
        "\t\t\t64,  # TODO: real value of width\n\t\t]\n"
    )
    patched = apply_stub(apply_stub(source, "Tabbed"), "Spaced")
    assert "        return [\n            64,  # TODO: real value of width\n        ]\n" in patched
    for name in ("Tabbed", "Spaced"):
        assert task_from_source(patched, "mixed.py", name).class_name == name


def test_stub_refused_when_inputs_exist() -> None:
    with pytest.raises(UserInputError, match="already has example inputs"):
        input_stub(Path(fixture("static_inputs.py")).read_text(), "GatedMLP")


# --- find_module_classes for editors ---------------------------------------------------------------
def test_find_module_classes_ranges_and_input_status() -> None:
    source = Path(fixture("several_modules.py")).read_text()
    lines = source.splitlines()
    found = find_module_classes(source, "several_modules.py")
    assert [m.name for m in found] == ["Encoder", "Decoder", "Critic"]
    for module in found:
        assert lines[module.start_line - 1].startswith(f"class {module.name}(")
        following = lines[module.end_line :]
        assert lines[module.end_line - 1].strip() and (not following or not following[0].strip())
    assert [m.has_inputs for m in found] == [True, True, False]
    assert found[2].missing_inputs is not None and "several_modules.py:39" in found[2].missing_inputs


def test_find_module_classes_excludes_decorators_and_follows_edits() -> None:
    source = "import torch.nn as nn\n\n@some.decorator\nclass A(nn.Module):\n    x = 1\n\n\nclass B(A):\n    pass\n"
    assert [(m.start_line, m.end_line) for m in find_module_classes(source)] == [(4, 5), (8, 9)]
    edited = source.replace("    x = 1\n", "    x = 1\n    y = 2\n    z = 3\n")
    assert [(m.start_line, m.end_line) for m in find_module_classes(edited)] == [(4, 7), (10, 11)]


def test_code_inside_strings_is_not_a_class() -> None:
    source = (
        'DOC = """\nclass Fake(nn.Module):\n    pass\n"""\nimport torch.nn as nn\n'
        "try:\n    import fast\nexcept ImportError:\n    fast = None\n"
        "class Real(nn.Module):\n    pass\n"
    )
    assert [(m.name, m.start_line) for m in find_module_classes(source)] == [("Real", 10)]


def test_piece_parser_falls_back_to_the_whole_file_when_a_cut_is_wrong() -> None:
    # A backslash-continued string fools the line scan: the piece before the cut does not parse.
    source = (
        'import torch.nn as nn\nMESSAGE = "one \\\nclass Fake(nn.Module): pass"\n'
        "class Real(nn.Module):\n    pass\n"
    )
    assert [(m.name, m.start_line, m.end_line) for m in find_module_classes(source)] == [("Real", 4, 5)]


def test_find_module_classes_syntax_error_raises() -> None:
    with pytest.raises(UserInputError, match=r"^<source>:2: syntax error"):
        find_module_classes("import torch\ndef broken(:\n")


def test_task_sources_are_themselves_valid_tasks() -> None:
    for name in ("kb_level3_residual_mlp.py", "helpers_constants.py", "static_inputs.py"):
        source = load_task(fixture(name)).source
        assert [(m.name, m.has_inputs) for m in find_module_classes(source) if not m.used_by] == [
            ("Model", True)
        ]


def test_find_module_classes_after_an_edit_is_much_faster_than_a_full_parse() -> None:
    block = Path(fixture("kb_level3_residual_mlp.py")).read_text().split("# Test code")[0]
    parts = [block.replace("Model", f"Model{i}").replace("ResidualBlock", f"ResidualBlock{i}")
             .replace("MLP", f"MLP{i}") for i in range(40)]
    source = "\n".join(parts)
    assert len(source.splitlines()) >= 2000
    find_module_classes(source)
    parse_seconds = min(_timed(lambda: ast.parse(source)) for _ in range(5))
    timings = []
    for edit in range(15):
        edited = source.replace("out = self.bn2(self.conv2(out))", f"out = self.bn2(self.conv2(out)) * {edit}", 1)
        timings.append(_timed(lambda edited=edited: find_module_classes(edited)))
    assert len(find_module_classes(edited)) == 120
    # Only the edited class is parsed again: on a quiet machine ~2.5 ms against ~20 ms for
    # ast.parse of the whole file. Best-of timings and a ratio keep the check meaningful on a
    # busy shared machine.
    assert min(timings) < 0.5 * parse_seconds


def _timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def test_task_module_imports_only_the_standard_library() -> None:
    code = (
        "import sys; before = set(sys.modules); import kevin_agent.task; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(sorted(n for n in new if n not in sys.stdlib_module_names))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['kevin_agent']"


@pytest.mark.parametrize("spec", ["missing.py", "no_inputs.py", "several_modules.py", "no_inputs.py::Nope"])
def test_cli_reports_task_errors_in_one_line_with_exit_code_2(spec: str) -> None:
    """Through the real `kevin` command: exit code 2, one line on stderr, no traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "kevin_agent", "prompt", fixture(spec)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kevin prompt: ") and "Traceback" not in done.stderr
