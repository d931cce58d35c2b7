"""The GPU tests' candidates, checked where no GPU is needed: none is rejected by the static checks
(so on a GPU it is provenance or correctness that judges them), KernelBench's example answers pass
the static checks and its adversarial kernels do not, and (marked ``nvcc``) every candidate
compiles and lists the kernels the profiler will call its own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kevin_agent.evaluate.static.checks import check_all, check_candidate

FIXTURES = Path(__file__).parent / "fixtures"
PROV = FIXTURES / "provenance_gpu"
KB = FIXTURES / "kernelbench"
CANDIDATES = sorted(p for p in PROV.glob("*.py") if not p.stem.endswith("_task"))
KB_ANSWERS = sorted(KB.glob("few_shot/model_new_ex_*.py"))
KB_ADVERSARIAL = sorted(KB.glob("test_kernels/*_kernel.py"))
# the judging probes with a kernel of their own (kernel_in_string has none, by design)
JUDGE_PROBES = sorted(p for p in (FIXTURES / "judge_gpu").glob("*.py") if p.stem != "kernel_in_string")


def test_every_candidate_has_a_readme_row():
    readme = (PROV / "README.md").read_text()
    for path in CANDIDATES:
        assert path.stem in readme, path.name
    assert len(CANDIDATES) == 33  # 14 too-lax families, 6 own styles, 3 partial, 5 float64, 5 honest look-alikes


@pytest.mark.parametrize("path", CANDIDATES, ids=lambda p: p.stem)
def test_gpu_candidates_pass_the_static_checks(path):
    """Judged on the GPU, not by spelling: no rejection (hints are fine)."""
    assert check_candidate(path.read_text()) == []


@pytest.mark.parametrize("path", KB_ANSWERS, ids=lambda p: p.stem)
def test_kernelbench_example_answers_pass_the_static_checks(path):
    task = (KB / "few_shot" / path.name.replace("model_new_ex_", "model_ex_")).read_text()
    rejections, hints = check_all(path.read_text(), task)
    assert rejections == []
    if "mnist2" in path.name:  # keeps its convolutions and linear layers in PyTorch: hints only
        assert {v.rule for v in hints} >= {"torch-compute", "nn-layer-call"}


@pytest.mark.parametrize("path", KB_ADVERSARIAL, ids=lambda p: p.stem)
def test_kernelbench_adversarial_kernels_are_rejected_statically(path):
    rules = {v.rule for v in check_candidate(path.read_text())}
    assert "no-global-kernel" in rules  # none of the three writes a kernel of its own
    if "non_default_stream" in path.name:
        assert "extra-stream" in rules


def _cache() -> Path:
    from build_cache_support import shared_build_cache_dir

    return shared_build_cache_dir()


@pytest.mark.nvcc
@pytest.mark.parametrize("path", CANDIDATES + KB_ANSWERS + JUDGE_PROBES, ids=lambda p: p.stem)
def test_candidate_compiles_and_lists_its_kernels(path):
    from kevin_agent.evaluate.build.cache import BuildCache
    from kevin_agent.evaluate.build.compile import compile_candidate

    arch = os.environ.get("TORCH_CUDA_ARCH_LIST", "9.0")
    outcome = compile_candidate(path.read_text(), BuildCache(_cache(), arch=arch))
    assert outcome.ok, outcome.message
    for result in outcome.results:
        assert result.kernels and result.kernels["kernels"], result.kernels
