"""The one way to serve Kevin-32B for the ``openai`` backend, and whether a local model server
shares the GPU that times the kernels.

README, docs/backends.md and ``kevin doctor`` all show ``SERVE_COMMAND`` (tests hold them to it).
A model server on the evaluation GPU runs its own kernels while candidates are timed, and holds
memory the candidates need: ``gpu_sharers`` finds the processes holding memory on the GPUs kevin
would evaluate on, from ``nvidia-smi --query-compute-apps`` (absent: nothing is said).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

SERVE_MODEL = "cognition-ai/Kevin-32B"
# bf16 (the weights are stored as F32), the reasoning split off as QwQ's parser does it, and a
# context that holds a turn's prompt and a 16k-token reply with room for the history
SERVE_FLAGS = ("--dtype", "bfloat16", "--reasoning-parser", "deepseek_r1", "--max-model-len", "32768")
SERVE_COMMAND = " ".join(("vllm", "serve", SERVE_MODEL, *SERVE_FLAGS))
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "")
SERVER_WORDS = ("vllm", "sglang", "text-generation", "llama", "serve")


def serve_command(model: str = SERVE_MODEL) -> str:
    """``SERVE_COMMAND`` for ``model`` (the configured one, when it is not Kevin-32B)."""
    return " ".join(("vllm", "serve", model, *SERVE_FLAGS))


def is_local_endpoint(base_url: str) -> bool:
    """The model server runs on this machine (its GPUs are the ones kevin times on)."""
    host = (urllib.parse.urlsplit(base_url).hostname or "").lower()
    return host in LOCAL_HOSTS or host == socket.gethostname().lower()


@dataclass(frozen=True)
class Sharer:
    """A process holding memory on an evaluation GPU."""

    pid: int
    gpu: str  # "GPU 0 (NVIDIA H100 80GB HBM3)"
    used_mib: int
    command: str

    def is_model_server(self) -> bool:
        return any(word in self.command.lower() for word in SERVER_WORDS)


def _rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split(",")] for line in text.splitlines() if line.strip()]


def evaluation_gpus(gpus_csv: str, visible: Optional[str]) -> dict[str, str]:
    """uuid -> "GPU i (name)" of the GPUs kevin evaluates on: those ``CUDA_VISIBLE_DEVICES`` names
    (indices or UUID prefixes), all of them when it is unset. ``gpus_csv``: index, uuid, name rows."""
    found = {row[1]: f"GPU {row[0]} ({row[2]})" for row in _rows(gpus_csv) if len(row) >= 3}
    if visible is None:
        return found
    wanted = [item.strip() for item in visible.split(",") if item.strip()]
    return {uuid: label for uuid, label in found.items()
            if any(uuid.startswith(w) or label.startswith(f"GPU {w} ") for w in wanted)}


def parse_sharers(apps_csv: str, gpus: Mapping[str, str], own_pids: frozenset[int],
                  command_of: Optional[dict[int, str]] = None) -> list[Sharer]:
    """The compute apps (pid, gpu_uuid, used_memory MiB, name rows) on ``gpus``, not ours."""
    sharers = []
    for row in _rows(apps_csv):
        if len(row) < 4 or row[1] not in gpus or not row[0].isdigit():
            continue
        pid = int(row[0])
        if pid in own_pids:
            continue
        used = int(row[2]) if row[2].isdigit() else 0
        sharers.append(Sharer(pid, gpus[row[1]], used, (command_of or {}).get(pid) or row[3]))
    return sharers


def _smi(nvidia_smi: str, query: str) -> str:
    done = subprocess.run([nvidia_smi, query, "--format=csv,noheader,nounits"], capture_output=True,
                          text=True, timeout=20, check=False)
    return done.stdout if done.returncode == 0 else ""


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def gpu_sharers(visible: Optional[str], own_pids: frozenset[int]) -> list[Sharer]:
    """The processes holding memory on the evaluation GPUs (empty without nvidia-smi)."""
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        return []
    try:
        gpus = evaluation_gpus(_smi(nvidia_smi, "--query-gpu=index,uuid,name"), visible)
        apps = _smi(nvidia_smi, "--query-compute-apps=pid,gpu_uuid,used_memory,process_name")
    except (OSError, subprocess.SubprocessError):
        return []
    pids = [int(row[0]) for row in _rows(apps) if row and row[0].isdigit()]
    return parse_sharers(apps, gpus, own_pids, {pid: _command_line(pid) for pid in pids})


def sharing_warning(sharer: Sharer) -> str:
    """One line for ``kevin doctor``: who holds memory on the timing GPU, and what to do."""
    who = "the model server" if sharer.is_model_server() else "another process"
    command = sharer.command if len(sharer.command) <= 80 else sharer.command[:77] + "..."
    return (f"warning: {who} (pid {sharer.pid}: {command}) holds {sharer.used_mib} MiB on {sharer.gpu}, "
            "which also times the kernels: its work skews the timings and its memory is the candidates'; "
            "serve on another GPU (CUDA_VISIBLE_DEVICES) or use a remote endpoint (docs/backends.md)")
