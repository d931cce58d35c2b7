"""Kevin's prompts: turn 0 (task + instruction + one-shot example) and refinement turns.

Refinement turns carry each earlier attempt as kernel + summary + evaluation, never the full
reasoning; when the conversation would exceed the budget the earliest attempts are dropped first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from kevin_agent import feedback
from kevin_agent.data import Candidate, Message, Task, Verdict
from kevin_agent.eval_modes import DEFAULT_POLICY, PARTIAL, STRICT, Policy
from kevin_agent.evaluate.provenance.policy import POLICY_PROMPTS
from kevin_agent.prompt_example import EXAMPLE_MODEL, EXAMPLE_MODEL_NEW

FALLBACK_GPU_NAME = "an NVIDIA GPU"

ARCHITECTURE_INTRO = "You are given the following architecture:"
PREVIOUS_ATTEMPTS_INTRO = "Here are your previous attempts:"
RESTART_INSTRUCTION = "Restart your reasoning process and generate new, complete code."
ATTEMPT_HEADER = re.compile(r"^### Attempt (\d+)\n\nYour code", re.MULTILINE)


# What each provenance policy lets the answer keep in PyTorch (the choice line and the torch.nn rule).
_CHOICE: dict[Policy, str] = {
    STRICT: "You may fuse operators and replace the algorithm (e.g. online softmax) when it is faster.",
    PARTIAL: ("You choose which operators to replace; you may also replace the algorithm (e.g. online "
              "softmax) when it is faster."),
}
_TORCH_NN_RULE: dict[Policy, str] = {
    STRICT: ("- torch.nn is not allowed for the computation; only nn.Parameter, containers (nn.Module, "
             "nn.ModuleList, ...) and weight initialisation (e.g. nn.init) may be used.\n"),
    PARTIAL: "",
}


def instruction(gpu_name: str, policy: Policy = DEFAULT_POLICY) -> str:
    """What the model must do; the same in every turn. ``policy`` (parsed with the settings) says
    what may stay in PyTorch (``evaluate.provenance.POLICY_PROMPTS``)."""
    return f"""\
Replace the PyTorch operators in this architecture with your own raw CUDA kernels so that it runs \
faster. The target GPU is: {gpu_name}. Optimise for it: use shared memory, kernel fusion (several \
operators in one kernel), warp-level primitives, vectorised memory access, and any other technique \
that helps. {_CHOICE[policy]}

Rules:
- Write the kernels inline in Python and compile them with \
torch.utils.cpp_extension.load_inline(name=..., cpp_sources=..., cuda_sources=..., functions=[...]).
- Name the new architecture ModelNew, with the same constructor and forward signature as Model.
{_TORCH_NN_RULE[policy]}- {POLICY_PROMPTS[policy]}
- Inputs and outputs live on the CUDA device.
- Answer with the complete new architecture in one ```python code block: real code that compiles \
and runs, with no testing code, no example usage and no placeholders.
- Your code will be evaluated: you will get feedback on its correctness and its speedup over \
PyTorch, and you will keep iterating to make it faster.
- After the code block, summarise your changes in a few sentences."""


def _example_block() -> str:
    return (
        "Here is an example. The architecture:\n\n"
        f"```python\n{EXAMPLE_MODEL}```\n\n"
        "An answer that replaces its addition with a CUDA kernel:\n\n"
        f"```python\n{EXAMPLE_MODEL_NEW}```\n\n"
        "Summary: the element-wise addition runs in one CUDA kernel, one thread per element, "
        "compiled with load_inline."
    )


def base_prompt(task: Task, gpu_name: str, policy: Policy = DEFAULT_POLICY) -> str:
    """The task and the instruction, without the example (the start of every refinement turn)."""
    return f"{ARCHITECTURE_INTRO}\n\n```python\n{_with_newline(task.source)}```\n\n{instruction(gpu_name, policy)}"


def turn0_prompt(task: Task, gpu_name: str, policy: Policy = DEFAULT_POLICY) -> str:
    """The first turn: task, instruction and the one-shot example."""
    return f"{base_prompt(task, gpu_name, policy)}\n\n{_example_block()}\n"


def format_attempt(number: int, candidate: Candidate, verdict: Verdict) -> str:
    """One earlier attempt: its kernel, its summary and its evaluation (no reasoning)."""
    if candidate.code:
        kernel = f"Your code:\n\n```python\n{_with_newline(candidate.code)}```"
    else:
        kernel = "Your code: (no code could be extracted from your answer)"
    summary = candidate.summary.strip() or "(no summary)"
    evaluation = verdict.message.strip()
    if candidate.code and candidate.finish_reason == "length":
        evaluation = f"{feedback.cut_off(candidate.tokens)}\n{evaluation}"
    return (
        f"### Attempt {number}\n\n{kernel}\n\nYour summary:\n{summary}\n\n"
        f"Evaluation:\n{evaluation}"
    )


def refinement_prompt(
    task: Task,
    history: Sequence[tuple[Candidate, Verdict]],
    gpu_name: str,
    first_attempt: int = 1,
    policy: Policy = DEFAULT_POLICY,
) -> str:
    """Base prompt + the attempts in ``history`` (numbered from ``first_attempt``) + restart line."""
    parts = [base_prompt(task, gpu_name, policy), PREVIOUS_ATTEMPTS_INTRO]
    if first_attempt > 1:
        omitted = first_attempt - 1
        parts.append(f"({omitted} earlier attempt{'s' if omitted > 1 else ''} omitted for length.)")
    parts += [
        format_attempt(first_attempt + i, cand, verd) for i, (cand, verd) in enumerate(history)
    ]
    parts.append(RESTART_INSTRUCTION)
    return "\n\n".join(parts) + "\n"


def build_messages(
    task: Task,
    history: Sequence[tuple[Candidate, Verdict]],
    gpu_name: str,
    budget_tokens: int,
    count_tokens: Callable[[str], int],
    policy: Policy = DEFAULT_POLICY,
) -> list[Message]:
    """The conversation for the next turn of one trajectory.

    ``history`` holds this trajectory's earlier turns in order. ``budget_tokens`` is what the
    prompt may use (context length minus the generation cap). Earliest attempts are dropped first;
    the latest attempt is always kept, even when it alone exceeds the budget. ``policy`` is the
    evaluation's provenance policy: the instruction says what it allows.
    """
    if not history:
        return [Message("user", turn0_prompt(task, gpu_name, policy))]
    for start in range(len(history)):
        text = refinement_prompt(task, history[start:], gpu_name, first_attempt=start + 1, policy=policy)
        if count_tokens(text) <= budget_tokens or start == len(history) - 1:
            return [Message("user", text)]
    raise AssertionError("unreachable")


def attempts_in_prompt(text: str) -> int:
    """How many earlier turns a prompt built here stands for (0 for turn 0): its turn index."""
    numbers = [int(n) for n in ATTEMPT_HEADER.findall(text)]
    return max(numbers, default=0)


def target_gpu_name(override: str | None = None, setting: str | None = None) -> str:
    """The GPU named in the prompt: explicit override > the real device > a setting > fallback."""
    if override:
        return override
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.cuda.current_device())
    except Exception:  # no torch or a broken driver: name the GPU from settings instead
        pass
    return setting or FALLBACK_GPU_NAME


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"
