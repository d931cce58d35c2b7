"""A newcomer's first hour, part three: the first compile talks, the build cache is visible, capped
and clearable (`kevin cache`), one serve command everywhere, `kevin doctor` warns about a model
server on the timing GPU, and one table of exit codes (help and README)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kevin_agent.backends.serve import SERVE_COMMAND, evaluation_gpus, is_local_endpoint, parse_sharers
from kevin_agent.cli import EXIT_CODE_TABLE, build_parser, exit_codes_markdown, main
from kevin_agent.config import cache_max_bytes
from kevin_agent.errors import EnvironmentProblem, KevinError, UserInputError
from kevin_agent.evaluate.build.ninja_file import PCH_HEADER, PCH_RECIPE, PCH_TEXT, ensure_pch, header_shim
from kevin_agent.evaluate.build.usage import clear, evict_least_recent, part_sizes
from kevin_agent.evaluate.cache_upkeep import with_header_notices

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


# -- the first compile talks ---------------------------------------------------------------------

def test_a_slow_header_step_says_what_it_does_then_how_long_then_done():
    said: list[str] = []
    release = threading.Event()
    worker = threading.Thread(target=with_header_notices,
                              args=(lambda: release.wait(30), said.append), kwargs={"slow_after_s": 0.05,
                                                                                    "every_s": 0.05})
    worker.start()
    deadline = time.monotonic() + 30
    while len(said) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    worker.join(30)
    assert said[0].startswith("building the shared torch header once, about 2 minutes on a laptop-class CPU")
    assert "later builds reuse it" in said[0]
    assert said[1].startswith("still building the shared torch header: ")
    assert said[-1].startswith("built the shared torch header in ")


def test_a_header_already_built_says_nothing():
    said: list[str] = []
    with_header_notices(lambda: None, said.append, slow_after_s=5.0)
    assert said == []


def test_the_evaluator_sends_its_notices_to_the_batchs_wait_channel(monkeypatch):
    """`kevin eval` prints on_wait lines on stderr; a run turns them into GpuWaiting events."""
    from kevin_agent.evaluate import evaluator as module
    from kevin_agent.evaluate.api import EvalSettings

    heard: list[str] = []
    monkeypatch.setattr(module, "with_header_notices", lambda work, say: say("building the shared torch header"))
    monkeypatch.setattr(module, "keep_under_cap", lambda root, cap, say: None)
    evaluator = module.CudaEvaluator(EvalSettings(compile_only=True))
    evaluator._notices = heard.append

    class Cache:
        root = Path("/nonexistent")

        def warm(self) -> None:
            pass

    evaluator._upkeep(Cache())  # type: ignore[arg-type]
    assert heard == ["building the shared torch header"]


# -- the build cache -------------------------------------------------------------------------------

def _entry(root: Path, key: str, size: int, used: float) -> Path:
    entry = root / "ext" / key
    (entry / "lib").mkdir(parents=True)
    (entry / "lib" / "m.so").write_bytes(b"x" * size)
    os.utime(entry, (used, used))
    return entry


def test_eviction_removes_least_recently_used_builds_until_under_the_cap(tmp_path):
    now = 1_000_000.0
    old = _entry(tmp_path, "old", 4000, now - 7200)
    middle = _entry(tmp_path, "middle", 4000, now - 3600)
    fresh = _entry(tmp_path, "fresh", 4000, now - 60)  # in use a minute ago: never evicted
    (tmp_path / "pch" / "k").mkdir(parents=True)
    (tmp_path / "pch" / "k" / "h.gch").write_bytes(b"h" * 3000)
    os.utime(tmp_path / "pch" / "k", (now - 30, now - 30))  # a header read half a minute ago
    result = evict_least_recent(tmp_path, cap_bytes=12_000, grace_s=600, now=now)
    assert (result.removed, result.freed) == (1, 4000)
    assert not old.exists() and middle.exists() and fresh.exists()
    assert (tmp_path / "pch" / "k" / "h.gch").exists()  # in use: kept
    everything = evict_least_recent(tmp_path, cap_bytes=1, grace_s=600, now=now)
    assert everything.removed == 1 and fresh.exists() and not middle.exists()
    assert evict_least_recent(tmp_path, cap_bytes=10**9, now=now).removed == 0


def test_a_header_no_build_has_read_for_days_goes_before_a_build_used_an_hour_ago(tmp_path):
    """A precompiled header of another torch or venv is never read again: the cap removes it, and
    every build stays, instead of emptying the builds while staying over the cap."""
    now = 1_000_000.0
    build = _entry(tmp_path, "recent", 4000, now - 3600)
    stale = tmp_path / "pch" / "old-venv"
    stale.mkdir(parents=True)
    (stale / "h.gch").write_bytes(b"h" * 9000)
    os.utime(stale, (now - 2 * 86400, now - 2 * 86400))
    result = evict_least_recent(tmp_path, cap_bytes=10_000, grace_s=600, now=now)
    assert (result.removed, result.freed, result.size) == (1, 9000, 4000)
    assert not stale.exists() and build.exists()


def test_a_header_in_use_is_touched_each_time_a_build_reads_it(tmp_path):
    class Toolchain:
        def fingerprint(self) -> dict[str, str]:
            return {"cxx": "c++"}

    key = hashlib.sha256(json.dumps([PCH_RECIPE, {"cxx": "c++"}, [], PCH_TEXT]).encode()).hexdigest()[:20]
    work = tmp_path / "pch" / key / "work"
    work.mkdir(parents=True)
    (work / (PCH_HEADER + ".gch")).write_bytes(b"built")
    os.utime(work.parent, (1000.0, 1000.0))
    shim = header_shim(tmp_path)
    os.utime(shim, (1000.0, 1000.0))
    info = ensure_pch(tmp_path, Toolchain(), [])  # type: ignore[arg-type]
    assert info.header == work / PCH_HEADER and info.seconds == 0.0
    assert work.parent.stat().st_mtime > 1_000_000
    header_shim(tmp_path)
    assert shim.stat().st_mtime > 1_000_000


def test_kevin_cache_shows_each_part_and_clear_empties_it(tmp_path, monkeypatch, capsys):
    root = tmp_path / "cache"
    _entry(root, "a", 2_000_000, time.time())
    (root / "pch" / "old-toolchain").mkdir(parents=True)
    (root / "pch" / "old-toolchain" / "h.gch").write_bytes(b"h" * 3_000_000)
    (root / "baselines").mkdir()
    (root / "baselines" / "b.json").write_text("{}")
    monkeypatch.setenv("KEVIN_BUILD_CACHE", str(root))
    monkeypatch.delenv("KEVIN_CACHE_MAX_GB", raising=False)  # the default cap (conftest raises it for the suite)
    monkeypatch.chdir(tmp_path)
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"build cache: {root}\n")
    assert re.search(r"headers \(precompiled torch headers\)\s+3\.0 MB", out), out
    assert re.search(r"builds \(compiled candidates\)\s+2\.0 MB", out), out
    assert "cap 5.0 GB" in out and "torch.compile caches" in out
    assert main(["cache", "clear"]) == 0
    assert "5.0 MB freed" in capsys.readouterr().out
    assert sum(size for _, size in part_sizes(root)) == 0 and root.is_dir()
    assert clear(root) == 0


def test_the_cache_cap_comes_from_the_environment_or_the_config_and_bad_values_are_one_line():
    assert cache_max_bytes({}, {}) == 5_000_000_000
    assert cache_max_bytes({"cache_max_gb": 2}, {}) == 2_000_000_000
    assert cache_max_bytes({"cache_max_gb": 2}, {"KEVIN_CACHE_MAX_GB": "0.5"}) == 500_000_000
    for bad in ("0", "-1", "lots", "inf"):
        with pytest.raises(UserInputError, match="cache_max_gb"):
            cache_max_bytes({}, {"KEVIN_CACHE_MAX_GB": bad})


def test_readme_names_the_cache_its_place_size_and_command():
    assert "~/.cache/kevin-agent/build/" in README and "~530 MB" in README and "~450 MB" in README
    assert "`kevin cache`" in README and "`kevin cache clear`" in README and "cache_max_gb" in README


# -- one serve command ------------------------------------------------------------------------------

def test_one_serve_command_in_readme_docs_and_doctor(tmp_path, monkeypatch):
    from kevin_agent.commands.doctor_cmd import Findings, _model_server

    texts = {path: path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
    serves = [(path.name, m.group(0)) for path, text in texts.items()
              for m in re.finditer(r"vllm serve cognition-ai/Kevin-32B[^`\n]*", text)]
    assert serves and all(command == SERVE_COMMAND for _, command in serves), serves
    assert any(name == "README.md" for name, _ in serves) and any(name == "backends.md" for name, _ in serves)
    for name in [k for k in os.environ if k.startswith(("KEVIN_", "OPENAI_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: nothing to say about GPUs
    monkeypatch.chdir(tmp_path)
    found = Findings()
    _model_server(found, "http://127.0.0.1:9/v1")
    assert f"start one (`{SERVE_COMMAND}`)" in found.lines[0]


def test_docs_say_how_to_keep_the_server_off_the_timing_gpu():
    backends = (ROOT / "docs" / "backends.md").read_text()
    for way in ("CUDA_VISIBLE_DEVICES=1 vllm serve", "--gpu-memory-utilization", "--base-url"):
        assert way in backends, way


GPUS = "0, GPU-aaaa, NVIDIA H100 80GB HBM3\n1, GPU-bbbb, NVIDIA H100 80GB HBM3\n"


def test_evaluation_gpus_follow_cuda_visible_devices():
    assert set(evaluation_gpus(GPUS, None)) == {"GPU-aaaa", "GPU-bbbb"}
    assert set(evaluation_gpus(GPUS, "1")) == {"GPU-bbbb"}
    assert set(evaluation_gpus(GPUS, "GPU-aaa")) == {"GPU-aaaa"}
    apps = "4242, GPU-aaaa, 70000, python3\n77, GPU-bbbb, 500, python3\nbad line\n"
    sharers = parse_sharers(apps, evaluation_gpus(GPUS, "0"), frozenset({77}), {4242: "python3 -m vllm serve x"})
    assert [(s.pid, s.used_mib, s.is_model_server()) for s in sharers] == [(4242, 70000, True)]
    assert is_local_endpoint("http://localhost:8000/v1") and not is_local_endpoint("http://gpu-box:8000/v1")


def _stand_in_nvidia_smi(folder: Path, pid: int) -> None:
    """nvidia-smi's two queries, answered as a host whose GPU 0 holds a vLLM server (``pid``)."""
    script = folder / "nvidia-smi"
    script.write_text("#!/bin/sh\ncase \"$1\" in\n"
                      f"  --query-gpu=*) printf '{GPUS.replace(chr(10), chr(92) + 'n')}' ;;\n"
                      f"  --query-compute-apps=*) printf '{pid}, GPU-aaaa, 71234, python3\\n' ;;\n"
                      "esac\n")
    script.chmod(0o755)


@pytest.mark.parametrize(("visible", "endpoint", "warned"), [
    ("0", "http://localhost:{port}/v1", True),   # the server sits on the GPU kevin times on
    ("1", "http://localhost:{port}/v1", False),  # kevin times on GPU 1: kept apart
    ("0", "http://gpu-box.invalid:{port}/v1", False),  # a remote endpoint: not this machine's
])
def test_doctor_warns_when_the_local_server_holds_memory_on_the_timing_gpu(tmp_path, visible, endpoint, warned):
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "vllm", "serve", "x"])
    try:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        _stand_in_nvidia_smi(bin_dir, server.pid)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVIN_", "OPENAI_"))}
        env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", CUDA_VISIBLE_DEVICES=visible)
        code = ("import os; from kevin_agent.commands.doctor_cmd import Findings, _model_server; f = Findings(); "
                f"_model_server(f, {endpoint.format(port=9)!r}); print(chr(10).join(f.lines))")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=120)
    finally:
        server.kill()
        server.wait()
    assert done.returncode == 0, done.stderr
    warning = [line for line in done.stdout.splitlines() if line.startswith("warning:")]
    if warned:
        assert len(warning) == 1, done.stdout
        assert f"the model server (pid {server.pid}:" in warning[0] and "vllm serve x" in warning[0]
        assert "71234 MiB on GPU 0 (NVIDIA H100 80GB HBM3)" in warning[0] and "CUDA_VISIBLE_DEVICES" in warning[0]
    else:
        assert warning == [], done.stdout


# -- exit codes, the README, the demo ------------------------------------------------------------

def test_help_and_readme_list_the_same_exit_codes_the_code_returns(capsys, monkeypatch):
    assert exit_codes_markdown() in README
    top = " ".join(build_parser().format_help().split())
    for code, meaning in EXIT_CODE_TABLE:
        assert f"{code} {' '.join(meaning.split())}" in top
    from kevin_agent.commands import runs_cmd

    outcomes = {KevinError("x"): 1, UserInputError("x"): 2, EnvironmentProblem("x"): 3, KeyboardInterrupt(): 130}
    for error, expected in outcomes.items():
        def fail(args, error=error):
            raise error
        monkeypatch.setattr(runs_cmd, "run", fail)
        assert main(["runs"]) == expected
    assert {code for code, _ in EXIT_CODE_TABLE} == {0, *outcomes.values()}


def test_readme_keeps_no_test_count_and_says_what_the_install_needs():
    assert not re.search(r"about [\d,]+ tests|[\d,]+ tests, of which", README)
    assert "5.6 GB" in README and "driver >= 580" in README and "CUDA 13.0" in README


def test_the_examples_demo_also_runs_in_a_folder_of_its_own():
    demo = (ROOT / "examples" / "README.md").read_text().split("## The demo", 1)[1]
    assert 'demo="$(mktemp -d)"' in demo and "/tmp/" not in demo
