"""Code lens and code action latency of `kevin lsp` on a 2,000-line file while a run goes on.

Starts the real server over stdio (scripted backend, replay evaluator with a delay so the run
lasts), starts a run, then times N code-lens and N code-action requests and prints p50/p95.
Usage: python bench/lsp_bench.py [--requests 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

ROOT = Path(__file__).resolve().parents[1]
CANDIDATE = (ROOT / "tests" / "fixtures" / "kernels" / "add_candidate.py").read_text()

CLASS_TEMPLATE = '''

class Block{i}(nn.Module):
    """Block {i}: a small MLP piece."""

    def __init__(self, width: int = 64):
        super().__init__()
        self.width = width
        self.scale = {i} + 1.0

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = x * self.scale
        z = z + y
        z = torch.relu(z)
        z = z - y * 0.5
        z = z / (1.0 + self.scale)
        z = z.clamp(min=-10.0, max=10.0)
        z = z * z
        z = z + x
        z = torch.tanh(z)
        z = z.mean(dim=-1, keepdim=True) + z
        return z

    @staticmethod
    def get_inputs():
        return [torch.randn(16, 64), torch.randn(16, 64)]

    @staticmethod
    def get_init_inputs():
        return [64]
'''


def big_module(lines: int = 2000) -> str:
    text, i = "import torch\nimport torch.nn as nn\n", 0
    while text.count("\n") < lines:
        text += CLASS_TEMPLATE.format(i=i)
        i += 1
    return "\n".join(text.splitlines()[:lines]) + "\n"


def write_inputs(folder: Path, turns: int) -> tuple[Path, Path]:
    reply = f"<think>fuse</think>\n\n```python\n{CANDIDATE}```\n\nSummary."
    script = folder / "script.json"
    script.write_text(json.dumps({"responses": [{"text": reply} for _ in range(turns * 2)]}))
    timing = {"median_ms": 1.0, "mean_ms": 1.0, "min_ms": 1.0, "max_ms": 1.0, "iqr_ms": 0.0, "trials": 10}
    verdict = {"stage": "timing", "ok": True, "message": "correct",
               "details": {"speedup_vs_eager": 1.5, "eager": timing, "kernel": timing}}
    replay = folder / "replay.json"
    replay.write_text(json.dumps({"default": verdict, "delay_s": 2.0}))
    return script, replay


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def measure(requests: int) -> dict[str, list[float]]:
    folder = Path(tempfile.mkdtemp(prefix="kevin-lsp-bench-"))
    source = big_module()
    module = folder / "big.py"
    module.write_text(source)
    script, replay = write_inputs(folder, turns=8)
    env = {**os.environ, "KEVIN_EVALUATOR": f"replay:{replay}", "PYTHONPATH": str(ROOT)}
    client = LanguageClient("kevin-bench", "0.1")
    await client.start_io(sys.executable, "-m", "kevin_agent", "lsp", env=env, cwd=str(folder))
    await client.initialize_async(types.InitializeParams(
        capabilities=types.ClientCapabilities(), root_uri=folder.as_uri(),
        initialization_options={"kevin": {"backend": "scripted", "script": str(script),
                                          "trajectories": 2, "turns": 8}}))
    client.initialized(types.InitializedParams())
    uri = module.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="python", version=1, text=source)))
    await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="kevin.optimize", arguments=[uri, "Block3"]))
    lines = source.splitlines()
    inside = [i for i, line in enumerate(lines) if "z = z * z" in line]
    timings: dict[str, list[float]] = {"textDocument/codeLens": [], "textDocument/codeAction": []}
    doc = types.TextDocumentIdentifier(uri)
    for n in range(requests):
        if n % 10 == 0:  # an edit now and then: the cache must not make the numbers
            version = n + 2
            lines[-1] = f"# edit {n}"
            client.text_document_did_change(types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text="\n".join(lines) + "\n")]))
        start = time.perf_counter()
        await client.text_document_code_lens_async(types.CodeLensParams(text_document=doc))
        timings["textDocument/codeLens"].append((time.perf_counter() - start) * 1000)
        line = inside[n % len(inside)]
        start = time.perf_counter()
        await client.text_document_code_action_async(types.CodeActionParams(
            text_document=doc, range=types.Range(types.Position(line, 8), types.Position(line, 8)),
            context=types.CodeActionContext(diagnostics=[])))
        timings["textDocument/codeAction"].append((time.perf_counter() - start) * 1000)
    await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command="kevin.cancel", arguments=[uri, "Block3"]))
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the client ignores notifications it has no handler for
    timings = asyncio.run(measure(args.requests))
    print(f"{'request':<26}{'n':>6}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}")
    worst = 0.0
    for name, values in timings.items():
        p95 = percentile(values, 0.95)
        worst = max(worst, p95)
        print(f"{name:<26}{len(values):>6}{statistics.median(values):>10.1f}{p95:>10.1f}{max(values):>10.1f}")
    print(f"(2,000-line file, a Kevin run going on; target p95 < 50 ms: {'met' if worst < 50 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
