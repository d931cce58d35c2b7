"""Parsing realistic reasoning-model replies into reasoning, code and summary (or a format error)."""

from __future__ import annotations

from kevin_agent.backends.base import Completion
from kevin_agent.parsing import find_code_blocks, parse_completion, split_reasoning

FINAL_CODE = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_source = r"""
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

relu = load_inline(name="relu", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                   cuda_sources=relu_source, functions=["relu_cuda"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu.relu_cuda(x)
'''

DRAFT_IN_REASONING = '''\
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)  # first idea, too lazy
'''

REASONING = (
    "Okay, so I need to replace the ReLU with a CUDA kernel. Let me think about memory access.\n"
    "A first sketch:\n\n```python\n" + DRAFT_IN_REASONING + "```\n\n"
    "No wait, that still calls torch.relu. I should write a real kernel with one thread per "
    "element; 256 threads per block is a good default on Hopper.\n"
)
SUMMARY = "I replaced torch.relu with a custom elementwise CUDA kernel (one thread per element)."
ANSWER = f"Here is the optimized architecture:\n\n```python\n{FINAL_CODE}```\n\n{SUMMARY}\n"


def parse(text: str, reasoning: str = "", finish: str = "stop", tokens: int = 0):
    return parse_completion(Completion(text=text, reasoning=reasoning, finish_reason=finish,
                                       tokens=tokens), trajectory=2, turn=3)


def test_qwq_style_reply_starts_inside_thinking_and_ignores_code_in_reasoning() -> None:
    candidate = parse(REASONING + "</think>\n\n" + ANSWER, tokens=1234)
    assert candidate.parse_error is None
    assert candidate.code == FINAL_CODE
    assert "torch.relu(x)  # first idea" not in candidate.code
    assert "A first sketch" in candidate.reasoning and "</think>" not in candidate.reasoning
    assert candidate.summary == SUMMARY
    assert (candidate.trajectory, candidate.turn, candidate.id, candidate.tokens) == (2, 3, "t2.3", 1234)


def test_explicit_think_tags() -> None:
    candidate = parse("<think>\n" + REASONING + "</think>\n" + ANSWER)
    assert candidate.code == FINAL_CODE
    assert candidate.reasoning.startswith("Okay, so I need")
    assert "<think>" not in candidate.reasoning


def test_separate_reasoning_content() -> None:
    candidate = parse(ANSWER, reasoning=REASONING)
    assert candidate.code == FINAL_CODE
    assert candidate.reasoning == REASONING.strip()
    assert candidate.summary == SUMMARY


def test_plain_answer_without_any_reasoning() -> None:
    candidate = parse(ANSWER)
    assert candidate.code == FINAL_CODE and candidate.reasoning == ""
    assert candidate.response == ANSWER


def test_only_draft_in_reasoning_is_not_code() -> None:
    candidate = parse(REASONING + "</think>\n\nI will describe the kernel in words only.")
    assert candidate.code is None
    assert "no fenced Python code block" in candidate.parse_error
    assert "```python" in candidate.parse_error  # tells the model what to do instead


def test_truncated_mid_block() -> None:
    cut = ANSWER[: ANSWER.index("class ModelNew") + 20]
    candidate = parse(REASONING + "</think>\n" + cut, finish="length", tokens=16384)
    assert candidate.code is None
    assert "cut off" in candidate.parse_error and "middle of a code block" in candidate.parse_error
    assert "16384 tokens" in candidate.parse_error


def test_truncated_while_still_reasoning() -> None:
    candidate = parse("<think>\n" + REASONING * 3, finish="length")
    assert candidate.code is None and "still reasoning" in candidate.parse_error
    assert "Okay, so I need" in candidate.reasoning


def test_cut_in_the_summary_judges_the_complete_block_and_says_it_was_cut() -> None:
    from kevin_agent.data import Stage, Verdict
    from kevin_agent.prompts import format_attempt

    candidate = parse(REASONING + "</think>\n" + ANSWER[:-20], finish="length", tokens=16384)
    assert candidate.parse_error is None and candidate.code == FINAL_CODE
    assert candidate.summary == SUMMARY[:-19].strip()  # what arrived of it
    attempt = format_attempt(1, candidate, Verdict(Stage.COMPILE, True, "Your answer compiled."))
    evaluation = attempt.split("Evaluation:\n", 1)[1]
    assert evaluation.startswith("Your reply was cut off at the generation limit (16384 tokens); the "
                                 "last complete code block was evaluated.")
    assert evaluation.endswith("Your answer compiled.")
    whole = parse(REASONING + "</think>\n" + ANSWER, tokens=900)  # not cut: no such note
    assert "cut off" not in format_attempt(1, whole, Verdict(Stage.COMPILE, True, "ok"))


def test_cut_inside_a_second_block_judges_the_last_complete_one() -> None:
    revised = ANSWER.replace("```\n\n", "```\n\nA faster version:\n\n```python\nclass ModelNew(nn.Module):\n    def", 1)
    candidate = parse(REASONING + "</think>\n" + revised, finish="length")
    assert candidate.parse_error is None and candidate.code == FINAL_CODE


def test_reply_ending_inside_thinking_without_length() -> None:
    candidate = parse("<think>\nI keep thinking and then stop.", finish="stop")
    assert candidate.code is None and "</think>" in candidate.parse_error


def test_unclosed_block_without_truncation() -> None:
    candidate = parse("```python\n" + FINAL_CODE)
    assert candidate.code is None and "never closed" in candidate.parse_error


def test_cuda_block_then_python_block() -> None:
    text = "The kernel:\n\n```cuda\n__global__ void k() {}\n```\n\n" + ANSWER
    candidate = parse(text)
    assert candidate.code == FINAL_CODE


def test_identical_repeated_blocks_take_the_last() -> None:
    text = ANSWER + "\nAgain, the final code:\n\n```python\n" + FINAL_CODE + "```\nDone: one kernel."
    candidate = parse(text)
    assert candidate.code == FINAL_CODE
    assert candidate.summary == "Done: one kernel."


def test_two_different_model_new_blocks_are_a_format_error() -> None:
    other = FINAL_CODE.replace("256", "512")
    text = ANSWER + "\nA faster variant:\n\n```python\n" + other + "```\n"
    candidate = parse(text)
    assert candidate.code is None
    assert "2 different code blocks that define ModelNew" in candidate.parse_error


def test_python_block_without_model_new() -> None:
    candidate = parse("```python\nclass Model(nn.Module):\n    pass\n```\nsummary")
    assert candidate.code is None and "ModelNew" in candidate.parse_error


def test_crlf_reply() -> None:
    crlf = (REASONING + "</think>\n" + ANSWER).replace("\n", "\r\n")
    candidate = parse(crlf)
    assert candidate.code == FINAL_CODE and "\r" not in candidate.code
    assert candidate.summary == SUMMARY


def test_tilde_fence_and_py_and_bare_fences() -> None:
    for opener, closer in (("~~~python", "~~~"), ("```py", "```"), ("```", "```"), ("````python", "````")):
        candidate = parse(f"{opener}\n{FINAL_CODE}{closer}\n{SUMMARY}")
        assert candidate.code == FINAL_CODE, opener
        assert candidate.summary == SUMMARY


def test_longer_fence_holds_inner_backticks() -> None:
    code = FINAL_CODE + 'DOC = """\n```\nnot a fence end\n```\n"""\n'
    candidate = parse(f"````python\n{code}````\nsummary here")
    assert candidate.code == code


def test_summary_falls_back_to_text_before_the_block() -> None:
    candidate = parse("I fused the ops into one kernel.\n\n```python\n" + FINAL_CODE + "```")
    assert candidate.code == FINAL_CODE
    assert candidate.summary == "I fused the ops into one kernel."


def test_request_error_becomes_parse_error() -> None:
    candidate = parse_completion(Completion(text="", error="HTTP 500 from x: boom"), 0, 0)
    assert candidate.code is None and "HTTP 500" in (candidate.parse_error or "")


def test_split_reasoning_and_block_finder_directly() -> None:
    reasoning, answer, finished = split_reasoning("thoughts</think>answer", "separate")
    assert (reasoning, answer, finished) == ("separate\n\nthoughts", "answer", True)
    blocks = find_code_blocks("a\n```python\nx = 1\n```\n~~~\nopen")
    assert [(b.language, b.code, b.closed) for b in blocks] == [("python", "x = 1\n", True),
                                                                ("", "open", False)]
