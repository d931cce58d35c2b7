"""Build-side provenance on real compiled objects (nvcc): the candidate's code and ours in separate
translation units, its objects' imports against the allow-list, its kernels' origins from the
preprocessed sources, all stored in the cache entry and decided in the parent before anything runs.

Honest styles pass under both policies; attacks written in the extension's C++ are rejected, each
by a reason the verdict names. Builds share the one test build cache (tests/build_cache_support).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from build_cache_support import shared_build_cache_dir

from kevin_agent.data import Stage, VerdictDetails
from kevin_agent.evaluate.build.cache import BuildCache, BuildResult, entry_dir, read_result
from kevin_agent.evaluate.provenance.build_check import build_reasons, build_rejection
from kevin_agent.evaluate.source.calls import ExtensionSpec, extract_static
from kevin_agent.evaluate.worker.provenance import own_kernels

FIXTURES = Path(__file__).parent / "fixtures"
HERE = FIXTURES / "provenance_build"
ADD = FIXTURES / "kernels" / "add_candidate.py"


def _spec(name: str, cuda: str, functions: tuple[str, ...], cpp: str) -> ExtensionSpec:
    return ExtensionSpec(name, (cpp,), (cuda,), functions)


@pytest.fixture(scope="module")
def cache() -> BuildCache:
    return BuildCache(shared_build_cache_dir())


def _build(cache: BuildCache, spec: ExtensionSpec) -> BuildResult:
    result = cache.build(spec)
    assert result.ok, result.errors
    assert result.facts is not None and not result.facts.get("error"), result.facts
    return result


def _facts(result: BuildResult) -> dict[str, Any]:
    assert result.facts is not None
    return result.facts


@pytest.fixture(scope="module")
def honest(cache) -> BuildResult:
    return _build(cache, _spec("kevin_prov_honest", (HERE / "honest_styles.cu").read_text(), ("styles",),
                               "std::vector<torch::Tensor> styles(torch::Tensor x, double scale);"))


@pytest.fixture(scope="module")
def attacks(cache) -> BuildResult:
    return _build(cache, _spec("kevin_prov_attacks", (HERE / "attacks_always.cu").read_text(), ("reach",),
                               "torch::Tensor reach(torch::Tensor x);"))


@pytest.fixture(scope="module")
def borrowed(cache) -> BuildResult:
    return _build(cache, _spec("kevin_prov_strict", (HERE / "attacks_strict.cu").read_text(), ("borrowed",),
                               "torch::Tensor borrowed(torch::Tensor a, torch::Tensor b);"))


@pytest.mark.nvcc
def test_honest_styles_pass_both_policies_and_their_own_kernels_are_known(honest):
    assert honest.path == "whole"  # a kernel named through a macro: the split refuses, load_inline's layout
    assert set(honest.facts["kernels"]) == {"scale_kernel", "row_sum_kernel"}  # nothing from cub's headers
    assert set(honest.facts["imports"]) == {"cuda.o"}  # the binding's object is not the candidate's
    for policy in ("strict", "partial"):
        assert build_reasons([honest], policy) == [], policy
    assert not honest.facts["host_asm"] and not honest.facts["exec_data"]


@pytest.mark.nvcc
def test_split_build_keeps_the_binding_apart(cache, honest):
    (spec,) = extract_static(ADD.read_text())
    result = _build(cache, spec)
    assert result.path == "split" and set(_facts(result)["imports"]) == {"kernels.o", "host.o"}
    assert _facts(result)["kernels"] == ["elementwise_add_kernel"]
    for built in (honest, result):
        imports = {name for names in _facts(built)["imports"].values() for name in names}
        assert not any(name.startswith(("Py", "_Py")) or "pybind11" in name for name in imports)
        assert build_reasons([built], "strict") == []


@pytest.mark.nvcc
def test_device_helpers_compiled_by_nvcc_pass_both_policies(cache):
    """Non-inline __device__ helpers (the softmax fixture's block reductions): nvcc's host stub of
    each calls exit(), which an H100 run of 2026-12-07 rejected as the candidate's process control."""
    (spec,) = extract_static((FIXTURES / "kernels" / "softmax_candidate.py").read_text())
    result = _build(cache, spec)
    assert result.path == "split" and "exit" in _facts(result)["imports"]["kernels.o"]
    assert _facts(result)["nvcc_objects"] == ["kernels.o"]
    for policy in ("strict", "partial"):
        assert build_reasons([result], policy) == [], policy


@pytest.mark.nvcc
def test_a_cached_build_keeps_its_facts_and_the_worker_uses_them(cache, honest):
    again = cache.build(_spec("other_name", (HERE / "honest_styles.cu").read_text(), ("styles",),
                              "std::vector<torch::Tensor> styles(torch::Tensor x, double scale);"))
    assert again.cache_hit and again.facts == honest.facts
    stored = read_result(entry_dir(cache.root, honest.key))
    assert stored is not None and stored.facts == honest.facts
    lib = Path(again.module_path).parent
    assert [p.suffix for p in lib.iterdir()] == [".so"]  # no sources beside the module
    own, _ = own_kernels([again])
    assert own and all("scale_kernel" in n or "row_sum_kernel" in n for n in own.names)


@pytest.mark.nvcc
def test_attacks_in_the_extension_are_rejected_under_both_policies_by_name(attacks):
    for policy in ("strict", "partial"):
        verdict = build_rejection([attacks], policy, VerdictDetails())
        assert verdict is not None and verdict.stage == Stage.PROVENANCE and not verdict.ok
        text = verdict.message
        assert "before it ran" in text
        for expected in ("the Python C API: PyEval_GetFrame", "PyRun_SimpleString", "dynamic loading",
                         "dlsym", "dl_iterate_phdr", "memory mapping: mprotect", "syscall", "files: open",
                         "operator registration", "inline assembly in host code at cuda_sources:"):
            assert expected in text, (policy, expected, text)


@pytest.mark.nvcc
def test_torch_and_library_compute_is_rejected_under_strict_only(borrowed):
    strict = " ".join(build_reasons([borrowed], "strict"))
    assert "ATen operators that compute" in strict and "at::_ops::matmul" in strict
    assert "at::native::relu_" in strict
    assert "cub::" in strict and "compiled in from library or PyTorch headers" in strict
    assert build_reasons([borrowed], "partial") == []


@pytest.mark.nvcc
def test_cpp_sources_with_definitions_are_bound_from_their_heads(cache):
    cuda = ("#include <torch/extension.h>\n__global__ void inc(float* y, int n) { int i = threadIdx.x; "
            "if (i < n) y[i] += 1.f; }\ntorch::Tensor add_one(torch::Tensor x) { auto y = x.clone(); "
            "inc<<<1, 256>>>(y.data_ptr<float>(), (int)y.numel()); return y; }\n")
    cpp = ("#include <torch/extension.h>\ntorch::Tensor add_one(torch::Tensor x);\n"
           "torch::Tensor plus_one(torch::Tensor x) {\n  TORCH_CHECK(x.is_cuda(), \"x must be CUDA\");\n"
           "  return add_one(x);\n}\n")
    result = _build(cache, _spec("kevin_prov_cppdefs", cuda, ("plus_one", "add_one"), cpp))
    assert "cpp.o" in _facts(result)["imports"]
    assert build_reasons([result], "strict") == []


@pytest.mark.nvcc
def test_bound_functions_that_cannot_be_declared_fail_with_one_clear_error(cache):
    cpp = "static torch::Tensor f(torch::Tensor x) { return x; }\n"
    result = cache.build(ExtensionSpec("e", (cpp,), ("__global__ void k() {}\n",), ("f",)))
    assert not result.ok and "defined static, inline or as a template" in (result.errors or "")
    lines = cache.build(ExtensionSpec("e", ("int f();",), ('#line 1 "/usr/include/x.h"\n__global__ void k() {}',),
                                      ("f",)))
    assert not lines.ok and "line directives" in (lines.errors or "")


NATIVE = HERE / "native_reach.py"


def honest_twin(code: str) -> str:
    """``native_reach.py`` without its reach: the same kernel, host code and headers."""
    code = re.sub(r"    if \(n == 12345\) \{.*?\n    \}\n", "", code, flags=re.S)
    code = code.replace('at::Tensor fake_relu(const at::Tensor& x) { return x; }\n'
                        'TORCH_LIBRARY_IMPL(aten, CUDA, m) { m.impl("relu", fake_relu); }\n', "")
    return code.replace("kevin_native_reach", "kevin_native_twin")


@pytest.mark.nvcc
def test_a_whole_answer_passes_the_static_checks_and_is_rejected_before_the_gpu(cache):
    """What the evaluator does before any GPU stage (the GPU test runs it through the evaluator)."""
    from kevin_agent.evaluate.build.compile import compile_candidate
    from kevin_agent.evaluate.verdicts import static_verdict

    task = (HERE / "scale_task.py").read_text()
    attack, twin = NATIVE.read_text(), honest_twin(NATIVE.read_text())
    assert "12345" not in twin and "TORCH_LIBRARY" not in twin
    for code in (attack, twin):
        assert static_verdict(code, task) is None  # nothing here is certain from the source alone
    outcomes = [compile_candidate(code, cache) for code in (attack, twin)]
    assert all(o.ok for o in outcomes), [o.message for o in outcomes]
    for policy in ("strict", "partial"):
        verdict = build_rejection(outcomes[0].results, policy, VerdictDetails())
        assert verdict is not None and verdict.stage == Stage.PROVENANCE
        for expected in ("PyEval_GetFrame", "dl_iterate_phdr", "mprotect", "syscall", "files: open",
                         "operator registration", "inline assembly in host code"):
            assert expected in verdict.message, (policy, expected)
        assert build_rejection(outcomes[1].results, policy, VerdictDetails()) is None  # the control
