"""Build-side provenance facts without a compiler: line directives, origins of preprocessed text,
the import allow-list, the decision on stored facts, and the worker's use of them (a cached
build's ``lib/`` holds only the module)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from kevin_agent.data import Stage, VerdictDetails
from kevin_agent.eval_modes import SandboxMode
from kevin_agent.evaluate.provenance.build_check import build_rejection
from kevin_agent.evaluate.provenance.facts import foreign_kernels, reasons
from kevin_agent.evaluate.provenance.imports import ALLOWED, COMPUTE, DENIED, classify
from kevin_agent.evaluate.provenance.origins import line_directives, own_lines, scan
from kevin_agent.evaluate.worker.provenance import own_kernels


def test_line_directives_in_every_spelling_and_not_in_comments_or_strings():
    source = ("int x;\n"
              '# 1 "/usr/include/stdio.h" 1 3\n'
              "  %: line 7\n"
              "#line 9\n"
              "// #line 5\n"
              '/* #line 6 */ const char* s = "#line 8";\n'
              "#\\\nline 12\n")
    found = line_directives(source)
    assert found[:3] == [2, 3, 4] and len(found) == 4  # the continued one is found too (numbering shifts)
    assert line_directives("#include <cuda.h>\n#define L __LINE__\n#pragma once\n") == []


PREPROCESSED = """# 0 "kernels.cu"
# 0 "<built-in>"
# 0 "<command-line>"
# 1 "/usr/local/cuda/include/cuda_runtime.h" 1 3 4
static void header_helper() { asm volatile("nop"); }
template <typename T> __attribute__((global)) void header_kernel(T* x) { }
# 0 "<command-line>" 2
# 1 "kernels.cu"
# 1 "/opt/torch/include/ATen/native/cuda/Loops.cuh" 1
namespace at { namespace native { __attribute__((global)) void vectorized_elementwise_kernel(float* x) { } } }
# 3 "kernels.cu" 2
# 1 "cuda_sources"
#define NOT_A_MARKER
template <typename T>
__attribute__((global)) void __attribute__((launch_bounds(256))) scale(const T* x, T* y, int n) {
  asm volatile("membar.gl;");
}
__attribute__((global)) void declared_only(float* x);
namespace my { namespace inner { __attribute__((global)) void nk(float* x) { } } }
namespace { __attribute__((global)) void hidden(float* x) { } }
extern "C" { __attribute__((global)) void c_kernel(float* x) { } }
static __attribute__((device)) __inline__ float twice(float v) {
  float r; asm("add.f32 %0, %1, %1;" : "=f"(r) : "f"(v)); return r; }
__attribute__((host)) __attribute__((device)) float both(float v) { asm("nop"); return v; }
# 40 "/usr/local/cuda/include/anything.h"
void host_launch(float* x) { long r; asm volatile("syscall" : "=a"(r) : "a"(39)); }
# 1 "local_copy.h" 1
void from_relative_include() { __asm__("int3"); }
# 50 "cuda_sources" 2
auto run_at_load = [] { __asm ("syscall"); return 0; }();
"""


def test_own_text_follows_includes_not_line_directives():
    lines, notes = own_lines(PREPROCESSED)
    text = "\n".join(raw for _, _, raw in lines)
    assert not notes
    assert "header_kernel" not in text and "vectorized_elementwise_kernel" not in text  # entered by absolute path
    assert "host_launch" in text  # a #line naming a system header does not make own text foreign
    assert "from_relative_include" in text  # a relative include is the candidate's


def test_scan_finds_own_kernels_by_qualified_name_and_host_assembly():
    facts = scan(PREPROCESSED)
    assert facts.kernels == ["scale", "my::inner::nk", "(anonymous namespace)::hidden", "c_kernel"]
    where = [w.split(":")[0] + ":" + w.split(":")[1] for w in facts.host_asm]
    assert len(facts.host_asm) == 4, facts.host_asm  # both(), host_launch(), the relative include, the lambda
    assert not any("scale" in w for w in where)
    host_only = scan(PREPROCESSED, device_code=False)  # a host compiler compiles __device__ code for the host
    assert len(host_only.host_asm) == 6 and host_only.kernels == []


def test_unbalanced_markers_are_noted():
    assert scan('# 1 "x.cu"\n# 3 "x.cu" 2\nint a;\n').notes == ["unbalanced line markers"]


@pytest.mark.parametrize("name, verdict", [
    ("at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>)", ALLOWED),
    ("float* at::TensorBase::data_ptr<float>() const", ALLOWED),
    ("c10::detail::torchCheckFail(char const*, char const*, unsigned int, char const*)", ALLOWED),
    ("c10::cuda::getCurrentCUDAStream(signed char)", ALLOWED),
    ("std::__cxx11::basic_ostringstream<char, std::char_traits<char>, std::allocator<char> >::str() &&", ALLOWED),
    ("operator delete[](void*)", ALLOWED), ("typeinfo for char const*", ALLOWED), ("cudaLaunchKernel", ALLOWED),
    ("__cudaPushCallConfiguration", ALLOWED), ("sinf", ALLOWED), ("__stack_chk_fail", ALLOWED),
    ("at::cuda::getCurrentDeviceProperties()", ALLOWED),
    ("at::_ops::mm::call(at::Tensor const&, at::Tensor const&)", COMPUTE),
    ("c10::Half* at::native::relu_(at::Tensor&)", COMPUTE),  # a return type never makes a name allowed
    ("at::cuda::blas::gemm<float>(char, char)", COMPUTE), ("cublasSgemm_v2", COMPUTE),
    ("PyEval_GetFrame", DENIED), ("_PyThreadState_UncheckedGet", DENIED),
    ("pybind11::module_::import(char const*)", DENIED), ("dlsym", DENIED), ("dl_iterate_phdr", DENIED),
    ("mprotect", DENIED), ("syscall", DENIED), ("open", DENIED), ("fopen", DENIED), ("getenv", DENIED),
    ("socket", DENIED), ("torch::Library::_impl(char const*, torch::CppFunction&&)", DENIED),
    ("c10::Dispatcher::singleton()", DENIED), ("cudaGetDriverEntryPoint", DENIED),
    ("std::basic_ifstream<char, std::char_traits<char> >::basic_ifstream(char const*)", DENIED),
    ("some_unknown_function", DENIED),
])
def test_classify(name, verdict):
    assert classify(name)[0] == verdict


def test_reasons_under_each_policy():
    mm = "_ZN2at4_ops2mm4callERKNS_6TensorES4_"
    facts = {"kernels": ["mine"], "imports": {"host.o": [mm, "dlsym"]}, "host_asm": [], "exec_data": [],
             "notes": [], "demangled": {mm: "at::_ops::mm::call(at::Tensor const&, at::Tensor const&)"},
             "foreign_kernels": foreign_kernels(["mine"], ["_Z4minePf", "_ZN3cub18DeviceReduceKernelEv"])}
    strict = reasons(facts, "strict")
    partial = reasons(facts, "partial")
    assert any("dynamic loading: dlsym (host.o)" in r for r in strict) and any("dlsym" in r for r in partial)
    assert any("ATen operators that compute" in r for r in strict)
    assert not any("ATen operators" in r for r in partial)
    assert any("cub::DeviceReduceKernel" in r for r in strict) and not any("cub::" in r for r in partial)
    assert reasons({"error": "x"}, "partial") == ["the build's own objects could not be checked (x)"]


def test_exit_is_nvccs_own_import_only_in_an_object_nvcc_compiled():
    """nvcc's host stub of a non-inline __device__ function calls exit(); host code calling it is the
    candidate's own process control, rejected as before."""
    facts = {"kernels": ["mine"], "imports": {"kernels.o": ["exit", "atexit"], "host.o": ["exit"]},
             "host_asm": [], "exec_data": [], "notes": [], "demangled": {}, "foreign_kernels": [],
             "nvcc_objects": ["kernels.o"]}
    for policy in ("strict", "partial"):
        assert reasons(facts, policy) == ["your code calls raw system calls and process control: exit (host.o)"]
    assert reasons({**facts, "imports": {"kernels.o": ["exit", "syscall"]}}, "partial") == [
        "your code calls raw system calls and process control: syscall (kernels.o)"]
    del facts["nvcc_objects"]  # facts of an older build: nothing is nvcc's
    assert "exit (kernels.o)" in reasons(facts, "strict")[0]


def test_foreign_kernels_match_qualified_names_not_base_names():
    listed = ["_ZN2at6native29vectorized_elementwise_kernelEPf", "_Z29vectorized_elementwise_kernelPf"]
    assert foreign_kernels(["vectorized_elementwise_kernel"], listed) == ["at::native::vectorized_elementwise_kernel"]


def test_build_rejection_is_a_provenance_verdict_naming_the_symbols():
    result = SimpleNamespace(facts={"kernels": [], "imports": {"host.o": ["PyEval_GetFrame"]}, "host_asm": [],
                                    "exec_data": [], "notes": []}, kernels={"kernels": []})
    verdict = build_rejection([result], "partial", VerdictDetails())
    assert verdict is not None and verdict.stage == Stage.PROVENANCE and not verdict.ok
    assert "PyEval_GetFrame" in verdict.message and "Python C API" in verdict.message
    assert verdict.details.provenance.ok is False and verdict.details.provenance.policy == "partial"
    clean = SimpleNamespace(facts={"kernels": [], "imports": {"host.o": ["cudaLaunchKernel"]}}, kernels=None)
    assert build_rejection([clean], "strict", VerdictDetails()) is None
    assert build_rejection([SimpleNamespace(facts=None, kernels=None)], "strict", VerdictDetails()) is None


def test_cached_build_keeps_the_origin_filter(tmp_path: Path):
    """A cached entry's lib/ holds only the module: the origins come from the stored facts. (Before,
    the filter looked for sources beside the .so and never ran for a cached build, so an ATen kernel
    instantiated from a header counted as the candidate's own.)"""
    lib = tmp_path / "ext" / "key" / "lib"
    lib.mkdir(parents=True)
    module = lib / "kevin_key.so"
    module.write_bytes(b"not read: the listing is stored")
    listed = ["_Z10own_kernelPf", "_ZN2at6native29vectorized_elementwise_kernelEPf"]
    result = SimpleNamespace(module_path=str(module), kernels={"path": str(module), "kernels": listed},
                             facts={"kernels": ["own_kernel"], "imports": {}})
    own, _ = own_kernels([result])
    assert own.names == ("_Z10own_kernelPf",)
    assert "_ZN2at6native29vectorized_elementwise_kernelEPf" in own.bundled
    json.dumps(result.facts)  # what the cache stores
    # control: without stored origins (how every cached build was judged before) the filter cannot
    # run, and the ATen kernel passes as the candidate's own
    unfiltered, _ = own_kernels([SimpleNamespace(module_path=str(module), kernels=result.kernels, facts=None)])
    assert "_ZN2at6native29vectorized_elementwise_kernelEPf" in unfiltered.names


def test_binding_declarations_come_from_prototypes_or_definition_heads():
    from kevin_agent.evaluate.build.layout import BindingRefused, bindings_cpp, derived_declarations
    from kevin_agent.evaluate.source.calls import ExtensionSpec

    cpp = ("#include <torch/extension.h>\n#include <vector>\nusing torch::Tensor;\n#define SECRET 1\n"
           "Tensor add_one(Tensor x);\n"
           "std::vector<Tensor> both(Tensor x, double s = 2.0) {\n  return {x, add_one(x)};\n}\n"
           "static int helper() { return SECRET; }\n")
    text = derived_declarations(cpp, ("both", "add_one"))
    assert "std::vector<Tensor> both(Tensor x, double s = 2.0);" in text and "Tensor add_one(Tensor x);" in text
    assert "return" not in text and "SECRET" not in text and "using torch::Tensor;" in text
    with pytest.raises(BindingRefused, match="static, inline or as a template"):
        derived_declarations(cpp, ("helper",))
    with pytest.raises(BindingRefused, match="neither declares nor defines"):
        derived_declarations(cpp, ("missing",))
    own = ExtensionSpec("e", ("int f() { return 1; }\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { }",), (), ("f",))
    with pytest.raises(BindingRefused, match="PYBIND11_MODULE"):
        from kevin_agent.evaluate.build.layout import refuse_own_binding
        refuse_own_binding(own)
    generated = bindings_cpp(ExtensionSpec("e", ("int f();",), (), ("f",)), "kevin_m")
    assert "torch::wrap_pybind_function(f)" in generated and "kevin_m" not in generated  # shared by a task's builds
    assert "PYBIND11_MODULE(kevin_bindings_shared, m)" in generated
    naming = bindings_cpp(ExtensionSpec("e", ("int f(int n = TORCH_EXTENSION_NAME_LEN);",), (), ("f",)), "kevin_m")
    assert "#define TORCH_EXTENSION_NAME kevin_bindings_shared" in naming  # a longer word is not the macro
    naming = bindings_cpp(ExtensionSpec("e", ("#include <torch/extension.h>\nint f(const char* m = "
                                              "TORCH_EXTENSION_NAME);",), (), ("f",)), "kevin_m")
    assert "#define TORCH_EXTENSION_NAME kevin_m" in naming  # declarations that use the module's name keep it
    from kevin_agent.evaluate.build.layout import module_init_cpp
    assert 'PyInit_kevin_m() { return kevin_bindings_init(); }' in module_init_cpp("kevin_m")


def _tiny_build(folder: Path) -> None:
    import shutil
    import subprocess

    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    (folder / "host.cpp").write_text('#include <unistd.h>\n#line 1 "cuda_sources"\n'
                                     "#define QUIET(n) asm volatile(\"syscall\" :: \"a\"(n))\n"
                                     "long reach(long n) { QUIET(n); return syscall(n); }\n")
    subprocess.run([cxx, "-c", "host.cpp", "-o", "host.o"], cwd=folder, check=True, timeout=120)
    subprocess.run([cxx, "-E", "host.cpp", "-o", "host.ii"], cwd=folder, check=True, timeout=120)


@pytest.mark.parametrize("sandbox", ["auto", "off"])  # confined, and the unconfined control
def test_facts_child_reads_real_objects_and_never_follows_a_link(tmp_path: Path, sandbox: SandboxMode):
    from kevin_agent.evaluate.build.facts import build_facts

    _tiny_build(tmp_path)
    facts = build_facts(tmp_path, ["host.o"], [("host.ii", "cxx")], sandbox)
    assert not facts.get("error"), facts
    assert "syscall" in facts["imports"]["host.o"] and facts["host_asm"] == ["cuda_sources:2"]
    assert any("raw system calls" in r for r in reasons(facts, "partial"))
    (tmp_path / "elsewhere.o").write_bytes((tmp_path / "host.o").read_bytes())
    (tmp_path / "host.o").unlink()
    (tmp_path / "host.o").symlink_to(tmp_path / "elsewhere.o")
    linked = build_facts(tmp_path, ["host.o"], [("host.ii", "cxx")], sandbox)
    assert "cannot read the build's output" in linked["error"]
    assert reasons(linked, "partial")[0].startswith("the build's own objects could not be checked")
