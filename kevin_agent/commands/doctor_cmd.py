"""``kevin doctor``: what this machine offers kevin-agent and what can run here: torch and CUDA,
nvcc, the GPUs, the model server at the configured URL, and whether model-written code can be
confined (the sandbox self-check: each attack must be stopped).

Exit codes: 0 the main job (``kevin optimize``) can run here and every sandbox check passed; 3 the
main job cannot run here (no GPU, no nvcc, or no model server: the last lines say which, and what
still works); 1 a sandbox check failed. torch + the standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from kevin_agent.eval_modes import SANDBOX_MODES

EXIT_CODES = ("exit codes: 0 `kevin optimize` can run here and every sandbox check passed; 1 a sandbox "
              "check failed; 3 `kevin optimize` cannot run here (the last lines say what is missing)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXIT_CODES + (". The model server is the configured one: --base-url, else KEVIN_BASE_URL, "
                                  "else base_url in kevin.toml, else http://localhost:8000/v1; "
                                  "KEVIN_API_KEY (else OPENAI_API_KEY) is its key.")
    parser.add_argument("--sandbox", choices=[mode for mode in SANDBOX_MODES if mode != "off"], default="auto",
                        help="required: a host that cannot confine fails the check (default auto)")
    parser.add_argument("--base-url", default=None, metavar="URL",
                        help="the model server to check (default: as `kevin optimize` would use)")


@dataclass
class Findings:
    """What the checks found; ``missing`` lists what the main job lacks here."""

    lines: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    compiles: bool = False  # nvcc and a CUDA build of torch: `kevin eval --compile-only` works


def _environment(found: Findings) -> None:
    from kevin_agent.errors import EnvironmentProblem
    from kevin_agent.evaluate.environment import inspect_environment
    from kevin_agent.evaluate.lanes import local_devices

    try:
        info = inspect_environment()
    except EnvironmentProblem as err:
        found.lines.append(f"torch: {err}")
        found.missing.append("torch")
        return
    found.lines += [f"torch: {info.torch_version} (CUDA {info.torch_cuda or 'none: a CPU-only build'})",
                    f"nvcc: {info.nvcc or 'not found (set CUDA_HOME or put nvcc on PATH)'}"]
    found.compiles = bool(info.nvcc and info.torch_cuda)
    if not found.compiles:
        found.missing.append("nvcc" if info.torch_cuda else "a CUDA build of torch")
    devices = local_devices()
    found.lines.append("GPUs: " + (", ".join(f"{d.index}: {d.name} ({d.uuid})" for d in devices) or "none visible"))
    if not devices:
        found.missing.append("a GPU")


def probe_model_server(base_url: str, model: str, api_key: str | None, timeout_s: float = 10.0) -> str | None:
    """None when ``base_url`` answers /models and serves ``model``; else the one-line problem."""
    request = urllib.request.Request(base_url.rstrip("/") + "/models",
                                     headers={"Authorization": f"Bearer {api_key or 'EMPTY'}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = json.loads(response.read().decode("utf-8", "replace") or "{}")
    except urllib.error.HTTPError as err:
        hint = "; check KEVIN_API_KEY / OPENAI_API_KEY" if err.code in (401, 403) else ""
        return f"HTTP {err.code} from {base_url}/models{hint}"
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", None) or err
        return f"cannot reach {base_url} ({reason})"
    served = [m.get("id") for m in body.get("data", []) if isinstance(m, dict)] if isinstance(body, dict) else []
    if served and model not in served:
        return f"{base_url} does not serve {model} (it serves {', '.join(map(str, served))}; set --model / KEVIN_MODEL)"
    return None


def _model_server(found: Findings, base_url_flag: str | None) -> None:
    from kevin_agent.backends.serve import gpu_sharers, is_local_endpoint, serve_command, sharing_warning
    from kevin_agent.config import load_config, resolve_backend_settings

    settings = resolve_backend_settings({"base_url": base_url_flag}, os.environ, load_config(None))
    if settings.backend != "openai":
        found.lines.append(f"model: backend {settings.backend} (no server to check)")
        return
    url = settings.resolved_base_url
    problem = probe_model_server(url, settings.model, settings.api_key)
    if problem is None:
        found.lines.append(f"model server: {url} answers and serves {settings.model}")
    else:
        found.lines.append(f"model server: {problem}; start one (`{serve_command(settings.model)}`) or point "
                           "--base-url / KEVIN_BASE_URL at it")
        found.missing.append(f"a model server at {url}")
    if is_local_endpoint(url):  # a server on this machine may sit on the GPU that times the kernels
        sharers = gpu_sharers(os.environ.get("CUDA_VISIBLE_DEVICES"), frozenset({os.getpid()}))
        found.lines += [sharing_warning(sharer) for sharer in sharers]


def verdict_lines(found: Findings) -> list[str]:
    """The last lines: can the main job run here, and if not, what still works."""
    if not found.missing:
        return ["kevin optimize can run here."]
    lines = [f"kevin optimize cannot run here: it needs {', '.join(found.missing)}."]
    if found.compiles:
        lines.append("Here: `kevin eval FILE.py::Class CANDIDATE.py --compile-only` compiles a candidate (for 9.0 "
                     "without a GPU); `kevin optimize ... --cluster ray://HEAD:10001` uses a Ray cluster's GPUs.")
    lines.append("Without GPU or server: the recorded demo (README, \"Try it without a GPU\") runs anywhere.")
    return lines


def run(args: argparse.Namespace) -> int:
    from kevin_agent.evaluate.sandbox.check import check_sandbox, coverage, format_table, isolation_probe
    from kevin_agent.evaluate.sandbox.support import probe

    found = Findings()
    _environment(found)
    _model_server(found, args.base_url)
    for line in found.lines:
        print(line)
    support = probe()
    line, results = check_sandbox(args.sandbox)
    applied = line.removeprefix("sandbox: ")
    host = f"the host offers {support.summary()} (kernel {support.kernel}, {support.arch})"
    table, summary = format_table(f"sandbox: {applied}; {host}" if applied != support.summary() else
                                  f"sandbox: {applied} (kernel {support.kernel}, {support.arch})",
                                  results).rsplit("\n", 1)
    print(table)
    for area in coverage(support.landlock_abi, support.seccomp):
        print(f"  {area}")
    isolation, seconds = isolation_probe()
    print(f"  processes of a compile or worker: {isolation} (a confined start took {seconds * 1000:.0f} ms)")
    print(f"sandbox self-check: {summary}\n")
    for text in verdict_lines(found):
        print(text)
    if found.missing:
        return 3
    return 0 if all(r.ok for r in results) else 1
