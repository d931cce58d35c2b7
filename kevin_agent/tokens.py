"""Token counting for prompt budgets: the model's own tokenizer when it is already on disk.

Never downloads anything. Order: a ``tokenizer.json`` in a local model folder or in the Hugging Face
cache read with the ``tokenizers`` package; else ``transformers`` with ``local_files_only``; else
a conservative estimate (one token per three characters; code and CUDA tokenize densely).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from kevin_agent.data import Message

TokenCounter = Callable[[str], int]
CHARS_PER_TOKEN = 3
MESSAGE_OVERHEAD_TOKENS = 8  # role markers and separators of a chat template, per message


def estimate_tokens(text: str) -> int:
    """Conservative token count without a tokenizer: ceil(characters / 3)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache folder, honouring HF_HUB_CACHE / HF_HOME / XDG_CACHE_HOME."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "huggingface" / "hub"


def find_local_tokenizer_file(model: str) -> Path | None:
    """``tokenizer.json`` for ``model`` (a local folder or a hub id) if it is already on disk."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        candidate = folder / "tokenizer.json"
        return candidate if candidate.is_file() else None
    repo_dir = hf_hub_cache() / ("models--" + model.replace("/", "--"))
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo_dir / "refs" / "main"
    if ref.is_file():
        preferred = snapshots / ref.read_text().strip() / "tokenizer.json"
        if preferred.is_file():
            return preferred
    for snapshot in sorted(snapshots.iterdir()):
        candidate = snapshot / "tokenizer.json"
        if candidate.is_file():
            return candidate
    return None


def _tokenizers_counter(path: Path) -> TokenCounter | None:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception:  # a corrupt or foreign file: fall back, never fail a run over counting
        return None
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


def _transformers_counter(model: str) -> TokenCounter | None:
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    try:
        tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    except Exception:  # not cached locally (we never download)
        return None
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


@functools.lru_cache(maxsize=8)
def make_token_counter(model: str) -> TokenCounter:
    """A token counter for ``model``: its tokenizer when available locally, else the estimate."""
    path = find_local_tokenizer_file(model)
    counter = _tokenizers_counter(path) if path else None
    if counter is None and (path or Path(model).expanduser().is_dir()):
        counter = _transformers_counter(str(path.parent if path else model))
    return counter or estimate_tokens


def counter_kind(counter: TokenCounter) -> str:
    """'estimate' or 'tokenizer', for messages to the user."""
    return "estimate" if counter is estimate_tokens else "tokenizer"


def count_message_tokens(messages: Sequence[Message], count_tokens: TokenCounter) -> int:
    """Tokens of a whole conversation, with a small per-message template overhead."""
    return sum(count_tokens(m.content) + MESSAGE_OVERHEAD_TOKENS for m in messages)
