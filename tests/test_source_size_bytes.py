"""The 1 MB source limit counts bytes (UTF-8, as the file is written and parsed), not characters:
an answer of multi-byte characters under 1,000,000 characters but over 1,000,000 bytes is refused
by the static stage and by the build's own check. Boundary sizes are fixed numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from kevin_agent.evaluate.build.specs import SourceExtractionError, extract_specs
from kevin_agent.evaluate.verdicts import static_verdict

BASE = (Path(__file__).parent / "fixtures" / "kernels" / "add_candidate.py").read_text()


def padded_to(total_bytes: int, char: str) -> str:
    """BASE plus a comment of ``char`` (and ASCII to round off), exactly ``total_bytes`` in UTF-8."""
    room = total_bytes - len(BASE.encode("utf-8")) - len("# \n")
    width = len(char.encode("utf-8"))
    code = BASE + "# " + char * (room // width) + "x" * (room % width) + "\n"
    assert len(code.encode("utf-8")) == total_bytes
    return code


@pytest.mark.parametrize("char", ["é", "€", "😀"])  # 2, 3 and 4 bytes each
def test_multibyte_characters_over_one_megabyte_are_refused(char: str) -> None:
    code = padded_to(1_000_001, char)
    assert len(code) < 600_000  # far under the limit counted in characters
    verdict = static_verdict(code)
    assert verdict is not None and verdict.details.static_rule == "source-size"
    assert "1,000,001 bytes" in verdict.message


@pytest.mark.parametrize("char", ["é", "😀"])
def test_exactly_one_megabyte_is_allowed(char: str) -> None:
    verdict = static_verdict(padded_to(1_000_000, char))
    assert verdict is None or verdict.details.static_rule != "source-size"


def test_the_builds_own_check_counts_bytes_too() -> None:
    with pytest.raises(SourceExtractionError, match="over 1,000,000 bytes"):
        extract_specs(padded_to(1_000_001, "€"))
    specs, found_by = extract_specs(padded_to(1_000_000, "€"))
    assert found_by == "static" and len(specs) == 1
