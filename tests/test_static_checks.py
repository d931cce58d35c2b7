"""Static checks: every rule reports its hack (a rejection for the certain, evaluator-protecting
rules; a hint, never a rejection, for the compute-spelling rules) and stays silent on a look-alike;
the shared fixture kernels and realistic variations pass clean."""

from __future__ import annotations

from pathlib import Path

import pytest
from static_cases import ACCEPTED, REJECTED, TASK, make

from kevin_agent.evaluate.static.checks import (
    HINT,
    REJECT,
    RULES,
    Violation,
    check_all,
    check_candidate,
    format_violations,
    hints_for,
)

KERNELS = Path(__file__).parent / "fixtures" / "kernels"
STATIC = Path(__file__).parent / "fixtures" / "static"
FIXTURE_NAMES = ("add", "gelu", "matmul", "softmax")


def _rules(code: str, task: str | None = TASK) -> set[str]:
    return {v.rule for v in check_candidate(code, task)}


KIND = {rule.id: rule.kind for rule in RULES} | {"syntax": REJECT}
HARD = {"syntax", "no-model-new", "no-load-inline", "no-global-kernel", "no-kernel-launch", "empty-kernel",
        "empty-forward", "threads-processes", "extra-stream", "patching", "introspection", "hidden-code",
        "output-cache", "build-flags", "source-size"}


def test_only_certain_and_evaluator_protecting_rules_reject():
    assert {rule_id for rule_id, kind in KIND.items() if kind == REJECT} == HARD
    assert {rule_id for rule_id, kind in KIND.items() if kind == HINT} == {
        "torch-compute", "nn-layer-call", "tensor-compute", "cpp-torch-compute", "library-call", "try-except",
        "subclass-reference", "reference-use"}


@pytest.mark.parametrize("rule, code", [(r, c) for _, r, c in REJECTED], ids=[i for i, _, _ in REJECTED])
def test_reported(rule: str, code: str) -> None:
    rejections, hints = check_all(code, TASK)
    found = rejections if KIND[rule] == REJECT else hints
    assert rule in {v.rule for v in found}, (rejections, hints)
    hit = next(v for v in found if v.rule == rule)
    assert len(hit.message) > 30 and hit.message[0].isupper()
    if KIND[rule] == HINT:
        assert rule not in {v.rule for v in rejections}


@pytest.mark.parametrize("code", [c for _, c in ACCEPTED], ids=[i for i, _ in ACCEPTED])
def test_accepted(code: str) -> None:
    assert check_all(code, TASK) == ([], [])


def test_every_rule_has_a_rejected_and_an_accepted_case() -> None:
    covered = {rule for _, rule, _ in REJECTED}
    assert {rule.id for rule in RULES} <= covered
    assert len({rule.id for rule in RULES}) == len(RULES)
    assert len(ACCEPTED) >= len(RULES)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_kernels_pass_clean(name: str) -> None:
    code = (KERNELS / f"{name}_candidate.py").read_text()
    task = (KERNELS / f"{name}_task.py").read_text()
    assert check_candidate(code, task) == []


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_task_renamed_as_candidate_is_rejected(name: str) -> None:
    """The reference itself, handed in as ModelNew, is PyTorch compute with no kernel."""
    task = (KERNELS / f"{name}_task.py").read_text().replace("class Model(", "class ModelNew(")
    rules = _rules(task, None)
    assert {"no-load-inline", "no-global-kernel"} <= rules
    assert {v.rule for v in hints_for(task)} & {"torch-compute", "tensor-compute"}


@pytest.mark.parametrize("path", sorted(STATIC.glob("reject_*.py")), ids=lambda p: p.stem)
def test_static_fixture_files_rejected(path: Path) -> None:
    expected = path.stem.split("__")[0][len("reject_"):].replace("_", "-")
    assert expected in _rules(path.read_text()), path.name


@pytest.mark.parametrize("path", sorted(STATIC.glob("hint_*.py")), ids=lambda p: p.stem)
def test_static_fixture_files_hinted_not_rejected(path: Path) -> None:
    expected = path.stem.split("__")[0][len("hint_"):].replace("_", "-")
    rejections, hints = check_all(path.read_text(), TASK)
    assert expected in {v.rule for v in hints} and rejections == [], path.name


@pytest.mark.parametrize("path", sorted(STATIC.glob("accept_*.py")), ids=lambda p: p.stem)
def test_static_fixture_files_accepted(path: Path) -> None:
    assert check_all(path.read_text(), TASK) == ([], [])


def test_syntax_error_reports_its_line() -> None:
    code = make(forward="return scale.scale_cuda(x")
    [violation] = check_candidate(code)
    assert violation.rule == "syntax"
    bad_line = next(i for i, line in enumerate(code.splitlines(), 1) if "scale.scale_cuda(x" in line
                    and not line.rstrip().endswith(")"))
    assert violation.line is not None and violation.line >= bad_line


def test_cuda_violation_points_at_its_python_line() -> None:
    code = make(cuda="\n".join(["#include <torch/extension.h>"] + ["// filler"] * 5) + "\n"
                + "torch::Tensor f(torch::Tensor x) { return torch::matmul(x, x); }\n")
    hit = next(v for v in hints_for(code) if v.rule == "cpp-torch-compute")
    assert hit.line is not None
    assert "torch::matmul" in code.splitlines()[hit.line - 1]


def test_python_violation_names_the_call_and_the_remedy() -> None:
    [hit] = [v for v in hints_for(make(forward="return torch.matmul(x, x)")) if v.rule == "torch-compute"]
    assert "torch.matmul" in hit.message and "own CUDA kernel" in hit.message
    assert hit.line is not None
    assert "torch.matmul" in make(forward="return torch.matmul(x, x)").splitlines()[hit.line - 1]


def test_subclassing_any_task_class_is_reported_with_its_name() -> None:
    task = TASK + "\nclass Block(nn.Module):\n    pass\n"
    violations = hints_for(make(bases="Block"), task)
    assert any(v.rule == "subclass-reference" and "Block" in v.message for v in violations)


def test_format_violations_lists_lines_rules_and_limit() -> None:
    violations = [Violation("try-except", 3, "Remove the try."), Violation("no-load-inline", None, "Use load_inline.")]
    text = format_violations(violations)
    assert text.splitlines() == ["line 3: Remove the try. [try-except]", "Use load_inline. [no-load-inline]"]
    many = format_violations([Violation("x", i, "m") for i in range(1, 12)], limit=3)
    assert many.count("\n") == 3 and "8 more" in many


def test_static_checks_import_no_torch() -> None:
    import subprocess
    import sys

    probe = ("import sys, kevin_agent.evaluate.static.checks as s; "
             "s.check_candidate(open(sys.argv[1]).read()); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe, str(KERNELS / "add_candidate.py")],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
