"""The generated files: extraction of CUDA sources, the drop-in module and its test (no git)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from accept_support import MODULE, fixture_candidate, make_record

from kevin_agent.accept import plan_accept
from kevin_agent.accept.names import ArtifactNames, snake_case
from kevin_agent.errors import UserInputError
from kevin_agent.verdict_records import TrustRecord

FSTRING_CANDIDATE = textwrap.dedent('''
    import torch
    import torch.nn as nn
    from torch.utils.cpp_extension import load_inline

    BLOCK = 256 * max(1, torch.cuda.device_count())
    cuda_src = f"""
    __global__ void k(float* y) {{ y[threadIdx.x] = {BLOCK}; }}
    torch::Tensor run(torch::Tensor x) {{ k<<<1, {BLOCK}>>>(x.data_ptr<float>()); return x; }}
    """
    ext = load_inline(name="f", cpp_sources="torch::Tensor run(torch::Tensor x);",
                      cuda_sources=cuda_src, functions=["run"])


    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return ext.run(x)
''')


def _write_module(tmp_path: Path, kernel: str = "gelu", class_name: str = "FusedBlock") -> Path:
    from accept_support import fixture_task

    (tmp_path / "models").mkdir(exist_ok=True)
    path = tmp_path / MODULE
    path.write_text(fixture_task(kernel, class_name))
    return path


def _by_name(plan) -> dict[str, str]:
    return {path.name: text for path, text in plan.files.items()}


def test_snake_case_names(tmp_path):
    assert snake_case("FusedBlock") == "fused_block"
    assert snake_case("MLPBlock") == "mlp_block"
    assert snake_case("Conv2dGELU") == "conv2d_gelu"
    names = ArtifactNames("FusedBlock", tmp_path)
    assert names.module_path.name == "fused_block_cuda.py"
    assert names.test_path.name == "test_fused_block_cuda.py"
    assert names.kernel_path(0, ".cu").name == "fused_block_kernel.cu"
    assert names.kernel_path(1, ".cpp").name == "fused_block_kernel_2.cpp"
    assert names.drop_in_class == "FusedBlockCUDA"


def test_literal_sources_become_real_files(tmp_path):
    origin = _write_module(tmp_path)
    plan = plan_accept(make_record(origin, fixture_candidate("gelu")), repo_root=tmp_path)
    files = _by_name(plan)
    assert set(files) == {"fused_block_kernel.cu", "fused_block_kernel.cpp", "fused_block_cuda.py",
                          "test_fused_block_cuda.py"}
    assert all(path.parent == origin.parent for path in plan.files)
    cu, cpp, module = files["fused_block_kernel.cu"], files["fused_block_kernel.cpp"], files["fused_block_cuda.py"]
    assert "__global__ void gelu_kernel" in cu and "#include <cuda_runtime.h>" in cu
    assert "torch::Tensor gelu_cuda(torch::Tensor x);" in cpp
    assert 'm.def("gelu_cuda", torch::wrap_pybind_function(gelu_cuda), "gelu_cuda");' in cpp
    assert "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)" in cpp
    # the kernel text moved out of the Python module; the candidate class is renamed
    assert "__global__" not in module and "load_inline(" not in module
    assert "# gelu_source: moved to fused_block_kernel.cu" in module
    assert "class FusedBlockCUDA(nn.Module):" in module and "ModelNew" not in module
    assert '_load_files("fused_block_kernel", ["fused_block_kernel.cpp", "fused_block_kernel.cu"], ' \
           'extra_cuda_cflags=["-O3"])' in module
    for line in ("# kevin-run: r20261202-1", "# kevin-candidate: t1.3", "# kevin-speedup-vs-eager: 1.84",
                 "# kevin-speedup-vs-compile: 1.21", "# kevin-gpu: NVIDIA H200",
                 "# kevin-source: models/block.py::FusedBlock"):
        assert line in module
    ast.parse(module)
    ast.parse(files["test_fused_block_cuda.py"])


def test_computed_sources_stay_inline_with_a_note(tmp_path):
    origin = _write_module(tmp_path)
    plan = plan_accept(make_record(origin, FSTRING_CANDIDATE), repo_root=tmp_path)
    files = _by_name(plan)
    assert not any(name.endswith((".cu", ".cpp")) for name in files)
    module = files["fused_block_cuda.py"]
    assert "stay inline because its sources are built at run time" in module
    assert "ext = _LazyExtension(lambda: _load_inline_by_content(name=\"f\"" in module
    assert "# kevin-kernel: inline" in module
    ast.parse(module)


def test_sources_folded_from_constants_are_extracted(tmp_path):
    """An f-string over module constants folds like the build folds it (one source model)."""
    origin = _write_module(tmp_path)
    code = FSTRING_CANDIDATE.replace("BLOCK = 256 * max(1, torch.cuda.device_count())", "BLOCK = 256")
    files = _by_name(plan_accept(make_record(origin, code), repo_root=tmp_path))
    (kernel,) = [text for name, text in files.items() if name.endswith(".cu")]
    (host,) = [text for name, text in files.items() if name.endswith(".cpp")]
    assert "y[threadIdx.x] = 256;" in kernel and "kevin_launch_k(1, 256" in host


def test_the_drop_in_splits_device_code_from_torch_code(tmp_path):
    """The .cu holds only device code (nvcc compiles it without torch headers: a fast first import);
    the .cpp holds the torch wrapper, the launcher declarations and the bindings."""
    origin = _write_module(tmp_path, kernel="add")
    files = _by_name(plan_accept(make_record(origin, fixture_candidate("add")), repo_root=tmp_path))
    (kernel,) = [text for name, text in files.items() if name.endswith(".cu")]
    (host,) = [text for name, text in files.items() if name.endswith(".cpp")]
    assert "__global__" in kernel and "torch/" not in kernel and "#line" not in kernel
    assert "kevin_launch_" in kernel and "kevin_launch_" in host
    assert "#include <torch/extension.h>" in host and "PYBIND11_MODULE" in host and "__global__" not in host


def test_two_extensions_get_numbered_files(tmp_path):
    origin = _write_module(tmp_path)
    code = fixture_candidate("gelu").replace(
        "\n\nclass ModelNew",
        '\n\nsecond = load_inline(name="s", cpp_sources="int two();", cuda_sources="int two() { return 2; }",'
        ' functions={"two": "returns two"})\n\n\nclass ModelNew')
    files = _by_name(plan_accept(make_record(origin, code), repo_root=tmp_path))
    assert "int two() { return 2; }" in files["fused_block_kernel_2.cu"]
    assert 'm.def("two", torch::wrap_pybind_function(two), "returns two");' in files["fused_block_kernel_2.cpp"]
    assert '_load_files("fused_block_kernel_2", ["fused_block_kernel_2.cpp", "fused_block_kernel_2.cu"])' \
        in files["fused_block_cuda.py"]


def test_signature_mismatch_is_refused(tmp_path):
    origin = _write_module(tmp_path)
    code = fixture_candidate("gelu").replace("def forward(self, x: torch.Tensor)", "def forward(self, x, scale=1.0)")
    with pytest.raises(UserInputError, match=r"forward\(x, scale=\.\.\.\) differs from FusedBlock.forward\(x\)"):
        plan_accept(make_record(origin, code), repo_root=tmp_path)


def test_refuses_incorrect_suspicious_and_missing_origin(tmp_path):
    from accept_support import good_verdict

    from kevin_agent.data import Stage, Verdict

    origin = _write_module(tmp_path)
    code = fixture_candidate("gelu")
    wrong = Verdict(Stage.CORRECTNESS, False, "mismatch")
    with pytest.raises(UserInputError, match="not correct"):
        plan_accept(make_record(origin, code, wrong), "t1.3", repo_root=tmp_path)
    with pytest.raises(UserInputError, match="no correct, timed candidate"):
        plan_accept(make_record(origin, code, wrong), repo_root=tmp_path)
    flagged = good_verdict(trust=TrustRecord(suspicious=True, reasons=["faster than the speed of light"]))
    with pytest.raises(UserInputError, match="not trusted: faster than the speed of light. It earned nothing"):
        plan_accept(make_record(origin, code, flagged), "t1.3", repo_root=tmp_path)
    with pytest.raises(UserInputError, match="no origin file"):
        plan_accept(make_record(None, code), repo_root=tmp_path)
    with pytest.raises(UserInputError, match="no longer exists"):
        plan_accept(make_record(tmp_path / "gone.py", code), repo_root=tmp_path)
    assert sorted(p.name for p in origin.parent.iterdir()) == ["block.py"]


def test_target_dir_and_import_paths(tmp_path):
    origin = _write_module(tmp_path)
    (tmp_path / "models" / "__init__.py").write_text("")
    plan = plan_accept(make_record(origin, fixture_candidate("gelu")), repo_root=tmp_path,
                       target_dir=Path("kernels"))
    files = {path.relative_to(tmp_path).as_posix(): text for path, text in plan.files.items()}
    test_text = files["kernels/test_fused_block_cuda.py"]
    assert 'ORIGINAL_MODULE = "models.block"' in test_text
    assert 'DROP_IN_MODULE = "fused_block_cuda"' in test_text
    assert '(_HERE / "..").resolve()' in test_text and '(_HERE / ".").resolve()' in test_text


def _accepted_files(tmp_path: Path) -> dict[str, Path]:
    origin = _write_module(tmp_path)
    plan = plan_accept(make_record(origin, fixture_candidate("gelu")), repo_root=tmp_path)
    for path, text in plan.files.items():
        path.write_text(text)
    return {path.name: path for path in plan.files}


def _clean_env(extensions: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["TORCH_EXTENSIONS_DIR"] = str(extensions)
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def test_generated_module_imports_without_building(tmp_path):
    files = _accepted_files(tmp_path)
    extensions = tmp_path / "torch_extensions"
    script = (
        "import sys; sys.path.insert(0, 'models');"
        "import fused_block_cuda as m; block = m.FusedBlockCUDA();"
        "print(type(block).__name__, type(block.gelu).__name__, m._KERNEL_DIR.name)"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=_clean_env(extensions),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["FusedBlockCUDA", "_LazyExtension", "models"]
    assert not extensions.exists() or not any(extensions.iterdir())
    assert files["fused_block_cuda.py"].is_file()


def test_generated_test_skips_with_reason_without_gpu(tmp_path):
    files = _accepted_files(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rs", "-q", "-p", "no:cacheprovider", str(files["test_fused_block_cuda.py"])],
        cwd=tmp_path, env=_clean_env(tmp_path / "ext"), capture_output=True, text=True, timeout=300,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "3 skipped" in out
    assert "FusedBlockCUDA needs a CUDA GPU: torch.cuda.is_available() is False here" in out


@pytest.mark.nvcc
@pytest.mark.timeout(1200)  # one torch extension build: ~100 s alone, minutes on a busy 2-core box
def test_generated_kernel_files_build_on_first_use(tmp_path):
    """The written .cpp/.cu compile as a real extension (nvcc, no GPU) when first used, not before."""
    origin = _write_module(tmp_path, kernel="add")
    plan = plan_accept(make_record(origin, fixture_candidate("add")), repo_root=tmp_path)
    for path, text in plan.files.items():
        path.write_text(text)
    extensions = tmp_path / "torch_extensions"
    script = (
        "import sys; sys.path.insert(0, 'models'); import os;"
        "import fused_block_cuda as m; block = m.FusedBlockCUDA();"
        "print('before', sorted(os.listdir(os.environ['TORCH_EXTENSIONS_DIR'])) "
        "if os.path.isdir(os.environ['TORCH_EXTENSIONS_DIR']) else []);"
        "fn = block.elementwise_add.elementwise_add_cuda;"
        "print('built', callable(fn), type(block.elementwise_add._kevin_module).__name__)"
    )
    env = _clean_env(extensions)
    env.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    env["MAX_JOBS"] = "2"
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1100)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "before []"
    assert lines[-1] == "built True module"
    built = [p.name for p in extensions.iterdir()]
    assert len(built) == 1 and built[0].startswith("fused_block_kernel_")
    assert len(built[0]) == len("fused_block_kernel_") + 16
