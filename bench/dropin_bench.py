"""How long an accepted kernel's first import takes: accept a fixture kernel into a fresh git
repository, then time, in a fresh process with an empty torch extension cache, importing the
generated drop-in module and running its first forward (the build happens there).

    python bench/dropin_bench.py [--kernels add,gelu,softmax] [--out FILE]

Prints a table; needs a CUDA device (the forward runs) and nvcc. Target: <= 15 s on the H200 host.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

FIRST_USE = """
import sys, time, torch
sys.path.insert(0, "models")
started = time.perf_counter()
import block, fused_block_cuda
drop_in = fused_block_cuda.FusedBlockCUDA().cuda()
inputs = [x.cuda() for x in block.get_inputs()]
with torch.no_grad():
    drop_in(*inputs)
torch.cuda.synchronize()
print(f"first-use {time.perf_counter() - started:.3f}")
"""


def first_import(kernel: str, work: Path) -> dict[str, Any]:
    from accept_support import MODULE, fixture_candidate, make_record, make_repo

    from kevin_agent.accept import accept, plan_accept

    root = work / kernel
    root.mkdir(parents=True)
    make_repo(root, kernel=kernel)
    result = accept(plan_accept(make_record(root / MODULE, fixture_candidate(kernel))), commit=True)
    files = [p.name for p in result.paths]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["TORCH_EXTENSIONS_DIR"] = str(work / f"ext-{kernel}")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", FIRST_USE], cwd=root, env=env, capture_output=True,
                          text=True, timeout=900)
    wall = time.perf_counter() - started
    inner = [float(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("first-use")]
    return {"kernel": kernel, "ok": done.returncode == 0, "process_s": wall,
            "import_and_first_forward_s": inner[0] if inner else None, "files": files,
            "error": None if done.returncode == 0 else done.stderr[-1500:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", default="add,gelu,softmax")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import torch

    work = Path(tempfile.mkdtemp(prefix="kevin-dropin-bench-"))
    rows = [first_import(k, work) for k in args.kernels.split(",")]
    print(f"drop-in first import on {torch.cuda.get_device_name(0)} ({os.cpu_count()} CPUs, torch {torch.__version__})")
    print(f"{'kernel':10} {'files':40} {'first import + forward':>24} {'process':>10}")
    for row in rows:
        first = row["import_and_first_forward_s"]
        print(f"{row['kernel']:10} {', '.join(row['files'])[:40]:40} "
              f"{'FAILED' if first is None else f'{first:.1f} s':>24} {row['process_s']:>8.1f} s")
        if row["error"]:
            print(row["error"])
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
