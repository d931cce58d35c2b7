"""Split a model reply into reasoning, code and summary (or a format error the model can act on).

Reasoning comes inline (``<think>...</think>``, or a reply that starts inside the thinking and only
closes it, as QwQ and Kevin do) or separately (``Completion.reasoning``, vLLM's reasoning parser).
The code is the complete fenced Python block defining ``ModelNew`` after the reasoning; code blocks
inside the reasoning never count. The summary is the text after that block. A reply cut at the
token limit (finish reason "length") after a complete block is judged by its last complete block;
cut before one, it is a format error saying where it was cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kevin_agent.backends.base import Completion
from kevin_agent.data import Candidate

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
PYTHON_LANGS = {"", "python", "py", "python3"}
_OPEN_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n]*)$")
_DEFINES_MODEL_NEW = re.compile(r"^[ \t]*class[ \t]+ModelNew\b", re.MULTILINE)

ANSWER_FORMAT_HINT = (
    "Give the complete code in exactly one ```python block that defines class ModelNew, "
    "then summarise your changes in a few sentences."
)


@dataclass(frozen=True)
class CodeBlock:
    language: str  # lower-cased first word of the info string ("" when none)
    code: str
    start: int  # offset of the opening fence line in the searched text
    end: int  # offset just after the closing fence line
    closed: bool

    @property
    def is_python(self) -> bool:
        return self.language in PYTHON_LANGS

    @property
    def defines_model_new(self) -> bool:
        return bool(_DEFINES_MODEL_NEW.search(self.code))


def split_reasoning(text: str, reasoning: str = "") -> tuple[str, str, bool]:
    """(reasoning, answer, reasoning_finished) from an inline or separate reasoning reply."""
    parts = [reasoning.strip()] if reasoning.strip() else []
    close = text.find(THINK_CLOSE)
    if close >= 0:
        inline = text[:close]
        opened = inline.find(THINK_OPEN)
        if opened >= 0:
            inline = inline[opened + len(THINK_OPEN):]
        if inline.strip():
            parts.append(inline.strip())
        return "\n\n".join(parts), text[close + len(THINK_CLOSE):], True
    opened = text.find(THINK_OPEN)
    if opened >= 0 and not text[:opened].strip():
        parts.append(text[opened + len(THINK_OPEN):].strip())
        return "\n\n".join(parts), "", False
    return "\n\n".join(parts), text, True


def find_code_blocks(text: str) -> list[CodeBlock]:
    """Fenced blocks (``` or ~~~) in order; a block still open at the end has ``closed=False``."""
    blocks: list[CodeBlock] = []
    lines = text.splitlines(keepends=True)
    offset = 0
    index = 0
    while index < len(lines):
        line = lines[index]
        match = _OPEN_FENCE.match(line.rstrip("\n"))
        if not match or (match.group("fence")[0] == "`" and "`" in match.group("info")):
            offset += len(line)
            index += 1
            continue
        fence = match.group("fence")
        info = match.group("info").strip()
        language = info.split()[0].lower() if info else ""
        start = offset
        offset += len(line)
        index += 1
        body: list[str] = []
        closed = False
        closing = re.compile(r"^ {0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$")
        while index < len(lines):
            inner = lines[index]
            offset += len(inner)
            index += 1
            if closing.match(inner.rstrip("\n")):
                closed = True
                break
            body.append(inner)
        blocks.append(CodeBlock(language, "".join(body), start, offset, closed))
    return blocks


def _normalise_code(code: str) -> str:
    return "\n".join(line.rstrip() for line in code.strip().splitlines())


def _truncation_error(reasoning_finished: bool, blocks: list[CodeBlock], tokens: int) -> str:
    limit = f" ({tokens} tokens)" if tokens else ""
    if not reasoning_finished:
        where = "while you were still reasoning, before any answer"
    elif blocks and not blocks[-1].closed:
        where = "in the middle of a code block"
    elif any(b.is_python and b.defines_model_new for b in blocks):
        where = "after the code, so the answer is incomplete"
    else:
        where = "before the code"
    return (
        f"your reply was cut off at the generation limit{limit} {where}. Reason more briefly "
        f"and leave room for the answer. {ANSWER_FORMAT_HINT}"
    )


def extract_answer(answer: str) -> tuple[str | None, str, str | None]:
    """(code, summary, error) from the text after the reasoning."""
    blocks = find_code_blocks(answer)
    complete = [b for b in blocks if b.closed and b.is_python and b.defines_model_new]
    if not complete:
        if blocks and not blocks[-1].closed:
            return None, "", f"your last code block was never closed with a fence. {ANSWER_FORMAT_HINT}"
        if any(b.closed and b.is_python for b in blocks):
            return None, "", (
                "none of your code blocks defines class ModelNew (the new architecture must be "
                f"named ModelNew). {ANSWER_FORMAT_HINT}"
            )
        return None, "", f"no fenced Python code block was found in your answer. {ANSWER_FORMAT_HINT}"
    distinct = {_normalise_code(b.code) for b in complete}
    if len(distinct) > 1:
        return None, "", (
            f"your answer contains {len(distinct)} different code blocks that define ModelNew, "
            f"so it is unclear which one is final. {ANSWER_FORMAT_HINT}"
        )
    chosen = complete[-1]
    summary = answer[chosen.end:].strip()
    if not summary:
        before = answer[: complete[0].start].strip()
        summary = before
    return chosen.code, summary, None


def parse_completion(completion: Completion, trajectory: int, turn: int) -> Candidate:
    """A Candidate from one completion; ``parse_error`` set (and ``code`` None) on a format error."""
    text = completion.text.replace("\r\n", "\n").replace("\r", "\n")
    reasoning_in = completion.reasoning.replace("\r\n", "\n").replace("\r", "\n")
    reasoning, answer, finished = split_reasoning(text, reasoning_in)
    candidate = Candidate(
        trajectory=trajectory,
        turn=turn,
        response=completion.text,
        reasoning=reasoning,
        finish_reason=completion.finish_reason,
        tokens=completion.tokens,
        id=f"t{trajectory}.{turn}",
    )
    if completion.error:
        candidate.parse_error = f"no reply was received from the model: {completion.error}"
        return candidate
    if completion.finish_reason == "length":
        blocks = find_code_blocks(answer) if finished else []
        complete = [b for b in blocks if b.closed and b.is_python and b.defines_model_new]
        if not complete:
            candidate.parse_error = _truncation_error(finished, blocks, completion.tokens)
            return candidate
        # cut at the token limit after a complete answer: judge its last complete block (the
        # prompt tells the model its reply was cut: prompts.format_attempt)
        chosen = complete[-1]
        candidate.code = chosen.code
        candidate.summary = answer[chosen.end:].strip() or answer[:complete[0].start].strip()
        return candidate
    if not finished:
        candidate.parse_error = (
            f"your reply ended inside the reasoning (no closing {THINK_CLOSE}). {ANSWER_FORMAT_HINT}"
        )
        return candidate
    code, summary, error = extract_answer(answer)
    candidate.code, candidate.summary, candidate.parse_error = code, summary, error
    return candidate
