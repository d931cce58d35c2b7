"""On a GPU: accept a real correct kernel, run its generated test, compare the drop-in on fresh inputs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/accept_support.py

from accept_support import MODULE, committed_paths, fixture_candidate, make_record, make_repo

from kevin_agent.accept import accept, plan_accept

FRESH_INPUTS = """
import sys, torch
sys.path.insert(0, "models")
import block, fused_block_cuda
torch.manual_seed(1234)
original, drop_in = block.FusedBlock().cuda(), fused_block_cuda.FusedBlockCUDA().cuda()
for trial in range(3):
    inputs = [x.cuda() * (trial + 1) for x in block.get_inputs()]  # fresh values, other scales
    with torch.no_grad():
        got = drop_in(*[x.clone() for x in inputs])
        want = original(*[x.clone() for x in inputs])
    torch.cuda.synchronize()
    assert got.shape == want.shape, (got.shape, want.shape)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert not torch.equal(got, torch.zeros_like(got))
print("drop-in matches")
"""


@pytest.mark.gpu
@pytest.mark.timeout(360)
@pytest.mark.parametrize("kernel", ["gelu", "softmax"])
def test_accepted_kernel_passes_its_generated_test(tmp_path, kernel):
    root = tmp_path / "repo"
    root.mkdir()
    repo = make_repo(root, kernel=kernel)
    result = accept(plan_accept(make_record(root / MODULE, fixture_candidate(kernel))), commit=True)
    assert committed_paths(repo) == {p.relative_to(root).as_posix() for p in result.paths}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["TORCH_EXTENSIONS_DIR"] = str(tmp_path / "torch_extensions")
    test_file = root / "models" / "test_fused_block_cuda.py"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(test_file)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "3 passed" in out and "skipped" not in out
    fresh = subprocess.run([sys.executable, "-c", FRESH_INPUTS], cwd=root, env=env,
                           capture_output=True, text=True, timeout=200)
    assert fresh.returncode == 0, fresh.stderr[-4000:]
    assert "drop-in matches" in fresh.stdout
    built = list((tmp_path / "torch_extensions").iterdir())
    assert len(built) == 1 and built[0].name.startswith("fused_block_kernel_")  # reused, not rebuilt
