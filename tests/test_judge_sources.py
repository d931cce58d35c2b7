"""Issue 19 on CPU: own kernels are recognised by where they came from (a ``__global__`` written in
the candidate's sources), not by name alone: kernels instantiated in the extension from PyTorch,
CUB or other headers count as library (ATen's as torch) under strict, whatever they are called."""

from __future__ import annotations

from pathlib import Path

from kevin_agent.evaluate.build.cache import BuildResult
from kevin_agent.evaluate.provenance.attribution import OwnKernels, attribute
from kevin_agent.evaluate.provenance.policy import judge
from kevin_agent.evaluate.provenance.symbols import defined_kernels, source_kernels
from kevin_agent.evaluate.provenance.trace import KernelActivity
from kevin_agent.evaluate.worker import provenance as W

MINE = "_Z9my_kernelPKfPfi"
MINE_D = "my_kernel(float const*, float*, int)"
ATEN = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13AddFunctorIfEESt5arrayIPcLm3EEEEviT0_T1_"
ATEN_D = ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, std::array<char*, 3ul> >"
          "(int, at::native::AddFunctor<float>, std::array<char*, 3ul>)")
DISGUISED = "_Z10add_kernelPKfS0_Pfi"  # own-looking name, defined in an included header, not the answer
DISGUISED_D = "add_kernel(float const*, float const*, float*, int)"
DEMANGLED = {MINE: MINE_D, ATEN: ATEN_D, DISGUISED: DISGUISED_D}


def test_defined_kernels_reads_every_common_spelling():
    text = """
    template <typename scalar_t> __global__ void scale_kernel(const scalar_t* x) {}
    __global__ void __launch_bounds__(256, 2) tiled(float* a) {}
    __global__ __launch_bounds__(128) void tiled2(float* a) {}
    extern "C" __global__ void c_kernel(float* a);
    namespace { __global__ static void anon_k(int n) {} }
    static __global__ void after_static(int) {}
    __device__ float helper(float x) { return x; }
    """
    assert defined_kernels(text) == {"scale_kernel", "tiled", "tiled2", "c_kernel", "anon_k", "after_static"}


def test_listed_kernels_not_written_in_the_sources_are_not_own():
    own = OwnKernels([MINE, ATEN, DISGUISED], DEMANGLED).from_sources({"my_kernel"})
    assert own.names == (MINE,)
    assert attribute(KernelActivity(MINE_D), own).origin == "own"
    aten = attribute(KernelActivity(ATEN_D), own)
    assert (aten.origin, aten.how) == ("torch", "bundled")
    disguised = attribute(KernelActivity(DISGUISED_D), own)
    assert (disguised.origin, disguised.how) == ("library", "bundled") and "header code" in disguised.family
    unrestricted = OwnKernels([MINE, ATEN, DISGUISED], DEMANGLED)
    assert attribute(KernelActivity(DISGUISED_D), unrestricted).origin == "own"  # by name alone, it passed


def test_strict_rejects_header_kernels_under_an_own_looking_name_partial_allows_them():
    acts = [KernelActivity(MINE_D, ms=0.01), KernelActivity(DISGUISED_D, ms=0.09)]
    own = OwnKernels([MINE, DISGUISED], DEMANGLED).from_sources({"my_kernel"})
    strict = judge(acts, own, 3, "strict")
    assert not strict.ok and "foreign compute" in strict.reasons[0] and "header code" in strict.reasons[0]
    assert judge(acts, own, 3, "partial").ok


def test_the_worker_reads_the_sources_next_to_each_build(tmp_path):
    folder = tmp_path / "entry" / "split"
    folder.mkdir(parents=True)
    (folder / "kernels.cu").write_text('#include "helpers.cuh"\n'
                                       "__global__ void my_kernel(const float* x, float* y, int n) {}\n")
    (folder / "main.cpp").write_text("torch::Tensor run(torch::Tensor x);\n")
    so = str(folder / "kevin_x.so")
    result = BuildResult(ok=True, seconds=1.0, cache_hit=True, log_path=None, errors=None, path="split",
                         module_path=so, kernels={"path": so, "kernels": [MINE, DISGUISED], "from_stubs": 2})
    assert source_kernels(so) == {"my_kernel"}
    own, _ = W.own_kernels([result])
    assert own.names == (MINE,) and DISGUISED in own.bundled


def test_without_sources_the_listing_decides_as_before(tmp_path):
    so = str(tmp_path / "nowhere" / "kevin_x.so")
    result = BuildResult(ok=True, seconds=1.0, cache_hit=True, log_path=None, errors=None, path="split",
                         module_path=so, kernels={"path": so, "kernels": [MINE, DISGUISED], "from_stubs": 2})
    assert source_kernels(so) is None
    own, _ = W.own_kernels([result])
    assert set(own.names) == {MINE, DISGUISED}
    assert Path(so).parent.exists() is False


def test_every_judge_gpu_probe_parses_and_has_a_readme_row():
    import ast

    folder = Path(__file__).parent / "fixtures" / "judge_gpu"
    readme = (folder / "README.md").read_text()
    probes = sorted(p for p in folder.glob("*.py") if not p.stem.endswith("_task"))
    assert [p.stem for p in probes] == ["counts_calls", "kernel_in_string", "rewrites_reference", "thread_offload"]
    for path in probes:
        ast.parse(path.read_text())
        assert f"`{path.stem}`" in readme, path.name
