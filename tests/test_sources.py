"""Finding load_inline arguments: statically where possible, else in a CPU-only child process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kevin_agent.evaluate.build.specs import SourceExtractionError, child_environment, extract_specs
from kevin_agent.evaluate.source.calls import ExtensionSpec, bind_arguments, extract_static, spec_from_call
from kevin_agent.evaluate.source.consts import NotStatic

FIXTURES = Path(__file__).parent / "fixtures"


def test_keyword_call_with_module_level_names():
    code = (
        "from torch.utils.cpp_extension import load_inline\n"
        "cuda_src = '__global__ void k() {}'\ncpp_src = 'void f();'\n"
        "mod = load_inline(name='m', cpp_sources=cpp_src, cuda_sources=cuda_src, functions=['f'],\n"
        "                  extra_cuda_cflags=['-O3'], verbose=True)\n"
    )
    (spec,) = extract_static(code)
    assert spec == ExtensionSpec("m", ("void f();",), ("__global__ void k() {}",), ("f",), (), ("-O3",))


def test_positional_call_and_attribute_access():
    code = "import torch.utils.cpp_extension as ce\nm = ce.load_inline('m', 'void f();', 'void g();')\n"
    (spec,) = extract_static(code)
    assert (spec.name, spec.cpp_sources, spec.cuda_sources) == ("m", ("void f();",), ("void g();",))


def test_concatenation_implicit_join_format_and_fstring():
    code = (
        "BLOCK = 256\nHEAD = '#include <torch/extension.h>\\n'\n"
        "body = ('__global__ void k() '\n        '{}')\n"
        "src = HEAD + body + f'\\n#define B {BLOCK}\\n' + '#define C {}\\n'.format(4) + '#define D %d' % 5\n"
        "lines = '\\n'.join(['int a;', 'int b;'])\n"
        "m = load_inline(name='m' + str, cpp_sources=[lines], cuda_sources=[src, 'x'])\n".replace(" + str", "")
    )
    (spec,) = extract_static(code)
    assert spec.cuda_sources == (
        "#include <torch/extension.h>\n__global__ void k() {}\n#define B 256\n#define C 4\n#define D 5", "x")
    assert spec.cpp_sources == ("int a;\nint b;",)


def test_call_inside_a_function_uses_its_local_constants():
    code = "def build():\n    src = 'void f();'\n    return load_inline(name='m', cpp_sources=src, functions='f')\n"
    (spec,) = extract_static(code)
    assert spec.cpp_sources == ("void f();",) and spec.functions == ("f",)


def test_functions_dict_keeps_names():
    (spec,) = extract_static("load_inline(name='m', cpp_sources='', functions={'f': 'doc', 'g': 'doc'})")
    assert spec.functions == ("f", "g")


@pytest.mark.parametrize(
    "code",
    [
        "import os\nsrc = os.environ['SRC']\nload_inline(name='m', cpp_sources=src)",
        "src = open('k.cu').read()\nload_inline(name='m', cpp_sources=src)",
        "load_inline(name='m', cpp_sources=f'{1.5:.2f}')",
        "args = {}\nload_inline(**args)",
        "src = 'a'\nsrc = make()\nload_inline(name='m', cpp_sources=src)",
    ],
)
def test_dynamic_arguments_are_not_static(code):
    with pytest.raises(NotStatic):
        extract_static(code)


def test_static_and_hook_normalise_alike():
    code = "load_inline('m', ['a', 'b'], 'c', functions=['f'], extra_cflags=['-O2'])"
    (static,) = extract_static(code)
    assert static == spec_from_call(("m", ["a", "b"], "c"), {"functions": ["f"], "extra_cflags": ["-O2"]})


def test_fixture_candidates_extract_statically():
    candidates = (sorted((FIXTURES / "kernels").glob("*_candidate.py"))
                  + sorted((FIXTURES / "build").glob("*_candidate.py")))
    assert candidates
    for path in candidates:
        specs, how = extract_specs(path.read_text())
        assert how == "static", path.name
        assert specs[0].cuda_sources and "__global__" in "".join(specs[0].cuda_sources)


def test_dynamic_candidate_is_recorded_in_a_child_without_secrets_or_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    code = (
        "import os\nfrom torch.utils.cpp_extension import load_inline\n"
        "assert 'OPENAI_API_KEY' not in os.environ and os.environ['CUDA_VISIBLE_DEVICES'] == ''\n"
        "parts = [str(i) for i in range(3)]\n"
        "src = '// ' + ''.join(parts) + '\\n__global__ void k() {}'\n"
        "mod = load_inline(name='dyn', cpp_sources='void f();', cuda_sources=src, functions=['f'])\n"
        "mod.f()\n"
    )
    specs, how = extract_specs(code)
    assert how == "child"
    assert specs == [ExtensionSpec("dyn", ("void f();",), ("// 012\n__global__ void k() {}",), ("f",))]


def test_child_failure_before_load_inline_is_reported():
    code = ("from torch.utils.cpp_extension import load_inline\nraise ValueError('boom' + str(1))\n"
            "load_inline(name='m', cpp_sources=str(2))\n")
    with pytest.raises(SourceExtractionError, match="ValueError: boom1"):
        extract_specs(code)


def test_no_load_inline_at_all():
    with pytest.raises(SourceExtractionError, match="no load_inline"):
        extract_specs("import torch\nx = 1\n")


def test_child_environment_drops_secret_names(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "t")
    monkeypatch.setenv("MY_PASSWORD", "p")
    monkeypatch.setenv("KEVIN_HARMLESS", "ok")
    env = child_environment()
    assert "HF_TOKEN" not in env and "MY_PASSWORD" not in env
    assert "KEVIN_HARMLESS" not in env  # an allow-list: an unknown name stays behind too
    assert env["CUDA_VISIBLE_DEVICES"] == "" and os.environ.get("HF_TOKEN") == "t"


def test_child_that_hangs_is_killed_within_the_limit():
    import time

    code = ("import time\nfrom torch.utils.cpp_extension import load_inline\nsrc = str(1)\nwhile True:\n"
            "    time.sleep(1)\n")
    start = time.monotonic()
    with pytest.raises(SourceExtractionError, match="did not finish within 20 s"):
        extract_specs(code, timeout_s=20)
    assert time.monotonic() - start < 40


def test_child_environment_scrubs_like_the_gpu_worker(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "a")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/c.json")
    monkeypatch.setenv("NPM_AUTH", "n")
    env = child_environment()
    assert not {"AWS_SECRET_ACCESS_KEY", "GOOGLE_APPLICATION_CREDENTIALS", "NPM_AUTH"} & set(env)


def test_forged_marker_line_is_ignored_not_a_traceback():
    from kevin_agent.evaluate.protocol import RECORD_MARKER

    code = (f"from torch.utils.cpp_extension import load_inline\nprint({RECORD_MARKER!r} + '{{not json')\n"
            "load_inline(name='m', cpp_sources=str(2))\n")
    specs, how = extract_specs(code)
    assert how == "child" and [s.name for s in specs] == ["m"]


def test_positional_name_and_sources_bind_through_torchs_signature():
    """KernelBench's few-shot examples call load_inline("name", cpp, cuda, functions=...)."""
    import ast

    code = ("from torch.utils.cpp_extension import load_inline\n"
            "CPP = 'torch::Tensor f(torch::Tensor x);'\nCUDA = '__global__ void k() {}'\n"
            "mod = load_inline('tiled_matmul', CPP, CUDA, functions=['f'], verbose=False)\n")
    (spec,) = extract_static(code)
    assert (spec.name, spec.cpp_sources, spec.functions) == ("tiled_matmul", (CPP_TEXT,), ("f",))
    call = next(n for n in ast.walk(ast.parse(code))
                if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "load_inline")
    assert set(bind_arguments(call)) == {"name", "cpp_sources", "cuda_sources", "functions", "verbose"}


CPP_TEXT = "torch::Tensor f(torch::Tensor x);"


def test_a_hooked_load_inline_still_binds_positional_arguments():
    """The GPU worker's hook and the recorder replace load_inline by (*args, **kwargs): the
    parameter order must come from torch's own signature, read before the swap."""
    from torch.utils import cpp_extension

    from kevin_agent.evaluate.source.calls import load_inline_parameter_order

    original = cpp_extension.load_inline
    order = load_inline_parameter_order()
    try:
        cpp_extension.load_inline = lambda *args, **kwargs: None
        load_inline_parameter_order.cache_clear()
        assert load_inline_parameter_order()[:3] == ("name", "cpp_sources", "cuda_sources")
        spec = spec_from_call(("flash_attn", "cpp", "cuda"), {"functions": ["f"]})
        assert spec.name == "flash_attn" and spec.cuda_sources == ("cuda",)
    finally:
        cpp_extension.load_inline = original
        load_inline_parameter_order.cache_clear()
    assert load_inline_parameter_order() == order
