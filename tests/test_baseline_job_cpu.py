"""The baseline job on the CPU (issue 20): it says where its time goes, part by part, and a worker
compiles torch.compile's kernels in its own process (no pool of compile processes per job)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from kevin_agent.data import VerdictDetails
from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.protocol import Baseline
from kevin_agent.evaluate.worker import baseline as baseline_job
from kevin_agent.evaluate.worker import guards
from kevin_agent.evaluate.worker.context import Context, load_reference
from kevin_agent.evaluate.worker.timing import wall_clock

ROOT = Path(__file__).resolve().parents[1]

TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, b):
        return torch.relu(a @ b)

def get_inputs():
    return [torch.randn(16, 8), torch.randn(8, 4)]

def get_init_inputs():
    return []
"""


class CpuContext(Context):
    def poison(self) -> int:
        return 0


def measure(tmp_path: Path, monkeypatch, with_torch_compile: bool) -> Baseline:
    monkeypatch.setattr(baseline_job, "reference_launches", lambda ctx, reference, inputs: 2)  # the profile: GPU
    monkeypatch.setattr(torch, "compile", lambda module: module)  # stands in for Inductor (GPU tests run it)
    settings = EvalSettings(sandbox="off", timing_trials=20, warmup_trials=2, with_torch_compile=with_torch_compile)
    ctx = CpuContext(guards.capture_references(own_modules=()), wall_clock(), "cpu", settings, VerdictDetails(),
                     tmp_path / "candidate.py", flush=lambda: None)
    task, reference, _ = load_reference(TASK, tmp_path, ctx)
    return baseline_job.measure_baseline(ctx, task, reference)


def test_a_baseline_job_says_where_its_time_went(tmp_path, monkeypatch):
    measured = measure(tmp_path, monkeypatch, with_torch_compile=True)
    assert list(measured.stage_seconds) == ["baseline_eager", "baseline_launches", "baseline_compile",
                                            "baseline_compiled", "baseline_flops"]
    assert min(measured.stage_seconds.values()) >= 0
    assert measured.compiled is not None and measured.torch_compile_seconds is not None
    assert measured.reference_kernels == 2 and measured.flops == 2 * 16 * 8 * 4
    again = Baseline.from_dict(measured.to_dict())  # what the baseline book stores
    assert again.stage_seconds == measured.stage_seconds


def test_without_torch_compile_its_parts_are_not_reported(tmp_path, monkeypatch):
    measured = measure(tmp_path, monkeypatch, with_torch_compile=False)
    assert "baseline_compile" not in measured.stage_seconds and measured.compiled is None
    assert "baseline_eager" in measured.stage_seconds


def test_a_stored_baseline_without_parts_still_reads(tmp_path, monkeypatch):
    """A baseline stored before jobs reported their parts (the book keeps them across versions)."""
    stored = measure(tmp_path, monkeypatch, with_torch_compile=False).to_dict()
    del stored["stage_seconds"]
    assert Baseline.from_dict(stored).stage_seconds == {}


WORKER_SETUP = """
import os, sys
os.environ.pop("TORCHINDUCTOR_COMPILE_THREADS", None)
if sys.argv[1] == "config-first":
    import torch._inductor.config  # imported before the worker limits the threads
from kevin_agent.evaluate.worker import main
main._one_compile_thread()
main._warm_imports()
import torch._inductor.config as config
print(config.compile_threads, os.environ["TORCHINDUCTOR_COMPILE_THREADS"])
"""


def test_a_worker_compiles_torch_compile_in_its_own_process():
    """Inductor decides its compile threads (one per core, a process pool) when its config is first
    imported; the worker's warm imports do that, so the limit must come first, or be set on the
    config. On a one-core machine both orders give 1 anyway; on more cores this fails on a break."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for order in ("limit-first", "config-first"):
        out = subprocess.run([sys.executable, "-c", WORKER_SETUP, order], capture_output=True, text=True, env=env,
                             cwd=ROOT, check=True).stdout.split()
        assert out == ["1", "1"], order


WORKER_CACHES = """
import json, os, sys
from pathlib import Path
from kevin_agent.evaluate.worker import main
main._one_compile_thread()
main._warm_imports()
import torch
from torch._inductor.runtime.cache_dir_utils import cache_dir
cache_dir()  # what the warm-up may ask first: it writes Inductor's default into the variable
main._prepare_caches(Path(sys.argv[1]))
compiled = torch.compile(lambda x: torch.relu(x) * 2)
compiled(torch.randn(8))
print(json.dumps({"inductor": os.environ["TORCHINDUCTOR_CACHE_DIR"], "triton": os.environ["TRITON_CACHE_DIR"]}))
"""


def _graphs_under(folder: Path) -> int:
    """Inductor's stored FX graphs under ``folder``."""
    return sum(1 for f in folder.rglob("*") if f.is_file() and "fxgraph" in f.parts)


def _worker_caches(tmp_path: Path, name: str, **env_vars: str) -> tuple[dict, Path, Path]:
    """A fresh process set up as a worker compiles with real Inductor on the CPU; (the folders it
    set, the build cache, its $TMPDIR)."""
    import json

    cache, tmp = tmp_path / name / "cache", tmp_path / name / "tmp"
    tmp.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    env.update(PYTHONPATH=str(ROOT), TMPDIR=str(tmp), **env_vars)
    out = subprocess.run([sys.executable, "-c", WORKER_CACHES, str(cache)], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), cache, tmp


def test_a_worker_keeps_torch_compile_builds_beside_the_build_cache(tmp_path):
    """Issue 20: the compile-ahead job and the baseline job run in different workers, so Inductor's
    graphs must land in the shared cache, not in Inductor's default under the worker's own $TMPDIR
    (which its warm imports write into TORCHINDUCTOR_CACHE_DIR). Control: a folder the parent named
    is kept."""
    folders, cache, tmp = _worker_caches(tmp_path, "default")
    assert folders == {"inductor": str(cache / "inductor"), "triton": str(cache / "triton")}
    assert _graphs_under(cache / "inductor") >= 1 and _graphs_under(tmp) == 0
    named = tmp_path / "named-inductor"
    folders, cache, tmp = _worker_caches(tmp_path, "named", TORCHINDUCTOR_CACHE_DIR=str(named))
    assert folders["inductor"] == str(named) and folders["triton"] == str(cache / "triton")
    assert _graphs_under(named) >= 1 and _graphs_under(cache) == 0 and _graphs_under(tmp) == 0
