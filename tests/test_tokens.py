"""Token counting: a real local tokenizer file when one is on disk (never a download), else the estimate."""

from __future__ import annotations

from pathlib import Path

import pytest

from kevin_agent.data import Message
from kevin_agent.tokens import (
    count_message_tokens,
    counter_kind,
    estimate_tokens,
    find_local_tokenizer_file,
    make_token_counter,
)


def _word_tokenizer(path: Path) -> None:
    """A small real tokenizer (word level, whitespace split) saved as tokenizer.json."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "hello": 1, "kernel": 2, "cuda": 3}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))


def test_estimate_is_conservative_ceiling() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abc") == 1
    assert estimate_tokens("abcd") == 2
    assert estimate_tokens("x" * 3000) == 1000


def test_unknown_model_falls_back_to_estimate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    make_token_counter.cache_clear()
    counter = make_token_counter("someone/not-downloaded")
    assert counter is estimate_tokens and counter_kind(counter) == "estimate"
    assert not (tmp_path / "empty-cache").exists()  # nothing was downloaded or created


def test_hub_cache_tokenizer_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "hub" / "models--cognition-ai--Kevin-32B"
    _word_tokenizer(repo / "snapshots" / "abc123" / "tokenizer.json")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    make_token_counter.cache_clear()
    assert find_local_tokenizer_file("cognition-ai/Kevin-32B") == repo / "snapshots" / "abc123" / "tokenizer.json"
    counter = make_token_counter("cognition-ai/Kevin-32B")
    assert counter_kind(counter) == "tokenizer"
    text = "hello cuda kernel hello unknownword"
    assert counter(text) == 5 != estimate_tokens(text)
    messages = [Message("user", "hello kernel"), Message("assistant", "cuda")]
    assert count_message_tokens(messages, counter) == 3 + 2 * 8
    make_token_counter.cache_clear()


def test_local_model_folder(tmp_path: Path) -> None:
    _word_tokenizer(tmp_path / "Kevin-32B" / "tokenizer.json")
    make_token_counter.cache_clear()
    counter = make_token_counter(str(tmp_path / "Kevin-32B"))
    assert counter("kernel kernel kernel") == 3
    make_token_counter.cache_clear()


def test_corrupt_tokenizer_file_falls_back(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "tokenizer.json").write_text("{not json")
    make_token_counter.cache_clear()
    assert make_token_counter(str(tmp_path / "m")) is estimate_tokens
    make_token_counter.cache_clear()
