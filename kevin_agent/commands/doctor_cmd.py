"""``kevin doctor``: what this machine offers kevin-agent: torch and CUDA, nvcc, the GPUs, and
whether model-written code can be confined (the sandbox self-check: each attack must be stopped).

Exit 0 when every sandbox check passed, 1 otherwise. torch + the standard library only.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sandbox", choices=("auto", "required"), default="auto",
                        help="required: a host that cannot confine fails the check (default auto)")


def _environment_lines() -> list[str]:
    from kevin_agent.errors import EnvironmentProblem
    from kevin_agent.evaluate.environment import inspect_environment

    try:
        info = inspect_environment()
    except EnvironmentProblem as err:
        return [f"torch: {err}"]
    lines = [f"torch: {info.torch_version} (CUDA {info.torch_cuda or 'none: a CPU-only build'})",
             f"nvcc: {info.nvcc or 'not found (set CUDA_HOME or put nvcc on PATH)'}"]
    from kevin_agent.evaluate.lanes import local_devices

    devices = local_devices()
    lines.append("GPUs: " + (", ".join(f"{d.index}: {d.name} ({d.uuid})" for d in devices) or
                             "none visible (kevin eval can still check and compile)"))
    return lines


def run(args: argparse.Namespace) -> int:
    from kevin_agent.evaluate.sandbox.check import check_sandbox, coverage, format_table, isolation_probe
    from kevin_agent.evaluate.sandbox.support import probe

    for line in _environment_lines():
        print(line)
    support = probe()
    print(f"sandbox: {support.summary()} (kernel {support.kernel}, {support.arch})")
    for area in coverage(support.landlock_abi, support.seccomp):
        print(f"  {area}")
    isolation, seconds = isolation_probe()
    print(f"  processes of a compile or worker: {isolation} (a confined start took {seconds * 1000:.0f} ms)")
    line, results = check_sandbox(args.sandbox)
    print(format_table(line, results))
    return 0 if all(r.ok for r in results) else 1
