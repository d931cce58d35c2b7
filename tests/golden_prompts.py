"""The golden prompts' inputs and texts, defined once: tests/test_prompts.py compares the prompts
with tests/golden/*.txt (never writing them); scripts/update_golden.py rewrites those files after a
deliberate change to the prompts, for review in the diff."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kevin_agent import feedback
from kevin_agent.data import Candidate, Stage, Task, Verdict, VerdictDetails
from kevin_agent.evaluate.provenance import STRICT, KernelActivity, OwnKernels, judge, profile_feedback
from kevin_agent.prompts import build_messages, turn0_prompt
from kevin_agent.tokens import estimate_tokens
from kevin_agent.verdict_records import TimingRecord

GOLDEN = Path(__file__).parent / "golden"
UPDATE_COMMAND = "python scripts/update_golden.py"

TASK_SOURCE = '''\
import torch
import torch.nn as nn

BATCH = 16
FEATURES = 4096


class Model(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.scale


def get_inputs():
    return [torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return [2.0]
'''
TASK = Task(source=TASK_SOURCE, class_name="ScaledRelu")


def _code(tag: str) -> str:
    return f"import torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass  # {tag}\n"


def history() -> list[tuple[Candidate, Verdict]]:
    """Three earlier turns: a format error, a compile error, a correct but slow kernel."""
    return [
        (
            Candidate(0, 0, reasoning="SECRET-REASONING-0", code=None, finish_reason="length",
                      parse_error="your reply was cut off"),
            Verdict(Stage.FORMAT, False, feedback.format_error("your reply was cut off at the limit")),
        ),
        (
            Candidate(0, 1, reasoning="SECRET-REASONING-1", code=_code("turn 1"),
                      summary="Fused relu and scale into one kernel."),
            Verdict(Stage.COMPILE, False,
                    feedback.compile_error("main.cu(12): error: identifier \"blockDimx\" is undefined")),
        ),
        (
            Candidate(0, 2, reasoning="SECRET-REASONING-2", code=_code("turn 2"),
                      summary="Fixed the typo; vectorised with float4."),
            Verdict(Stage.TIMING, True, feedback.correct(0.87) + "\n" + profile_feedback(_profile(), 0.41),
                    VerdictDetails(timing=TimingRecord(speedup_vs_eager=0.87))),
        ),
    ]


def _profile():
    """The accepted provenance of attempt 3: its fused kernel and a zeroed output (hand-made)."""
    own = "void relu_scale_kernel<float>(float const*, float*, float, long)"
    fill = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")
    trace = [KernelActivity(own, calls=1, ms=0.0312), KernelActivity(fill, calls=1, ms=0.0105,
                                                                       context=("aten::zeros", "aten::fill_"))]
    return judge(trace, OwnKernels([own]), 2, STRICT)


def _refinement() -> str:
    messages = build_messages(TASK, history(), "NVIDIA H200", 100_000, estimate_tokens)
    assert len(messages) == 1 and messages[0].role == "user"
    return messages[0].content


GOLDEN_TEXTS: dict[str, Callable[[], str]] = {
    "turn0_prompt.txt": lambda: turn0_prompt(TASK, "NVIDIA H200"),
    "refinement_prompt.txt": _refinement,
    "turn0_prompt_partial.txt": lambda: turn0_prompt(TASK, "NVIDIA H200", "partial"),
}


def check_golden(name: str, text: str, folder: Path = GOLDEN) -> None:
    """Assert ``text`` equals the golden file ``name``; never writes it, whatever the environment."""
    path = folder / name
    assert path.is_file(), f"{path} is missing; {UPDATE_COMMAND} writes it"
    assert text == path.read_text(encoding="utf-8"), f"{name} changed; review the change, then {UPDATE_COMMAND}"


def write_golden(folder: Path = GOLDEN) -> list[str]:
    """Write every golden text into ``folder``; the names of the files that changed."""
    folder.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, make in GOLDEN_TEXTS.items():
        path, text = folder / name, make()
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(name)
    return changed
