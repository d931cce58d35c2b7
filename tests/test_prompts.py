"""Kevin's prompts: golden texts, refinement history, budget trimming, the target GPU, `kevin prompt`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from golden_prompts import GOLDEN, GOLDEN_TEXTS, TASK, TASK_SOURCE, check_golden, history

from kevin_agent.evaluate.provenance import POLICY_PROMPTS
from kevin_agent.parsing import find_code_blocks
from kevin_agent.prompt_example import EXAMPLE_MODEL, EXAMPLE_MODEL_NEW
from kevin_agent.prompts import (
    FALLBACK_GPU_NAME,
    PREVIOUS_ATTEMPTS_INTRO,
    RESTART_INSTRUCTION,
    attempts_in_prompt,
    build_messages,
    target_gpu_name,
    turn0_prompt,
)
from kevin_agent.tokens import estimate_tokens

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", GOLDEN_TEXTS)
def test_golden_prompts(name: str) -> None:
    check_golden(name, GOLDEN_TEXTS[name]())


def test_a_test_run_never_rewrites_a_golden_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed prompt fails the comparison even where the old update variable is set; the file
    stays as it was (only scripts/update_golden.py writes golden files)."""
    kept = "the reviewed prompt\n"
    (tmp_path / "turn0_prompt.txt").write_text(kept, encoding="utf-8")
    monkeypatch.setenv("KEVIN_UPDATE_GOLDEN", "1")
    with pytest.raises(AssertionError, match="turn0_prompt.txt changed"):
        check_golden("turn0_prompt.txt", "a changed prompt\n", tmp_path)
    assert (tmp_path / "turn0_prompt.txt").read_text(encoding="utf-8") == kept


def test_the_update_script_writes_what_the_tests_compare(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "update_golden.py"), "--into", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for name in GOLDEN_TEXTS:
        assert (tmp_path / name).read_bytes() == (GOLDEN / name).read_bytes()
    assert not list(tmp_path.glob("*.tmp"))


def test_the_prompt_states_what_the_policy_allows() -> None:
    strict, partial = (turn0_prompt(TASK, "GPU", p) for p in ("strict", "partial"))
    assert POLICY_PROMPTS["strict"] in strict and POLICY_PROMPTS["partial"] in partial
    assert "torch.nn is not allowed" in strict and "torch.nn is not allowed" not in partial
    assert "You choose which operators to replace" in partial
    assert turn0_prompt(TASK, "GPU") == strict  # strict is the default
    refined = build_messages(TASK, history(), "GPU", 100_000, estimate_tokens, policy="partial")[0].content
    assert POLICY_PROMPTS["partial"] in refined


def test_turn0_has_task_instruction_and_example() -> None:
    prompt = turn0_prompt(TASK, "NVIDIA H200")
    assert prompt.startswith("You are given the following architecture:\n\n```python\n" + TASK_SOURCE)
    for phrase in ("load_inline", "ModelNew", "shared memory", "kernel fusion", "warp",
                   "The target GPU is: NVIDIA H200", "summarise your changes", "CUDA device"):
        assert phrase in prompt, phrase
    assert EXAMPLE_MODEL in prompt and EXAMPLE_MODEL_NEW in prompt
    assert build_messages(TASK, [], "NVIDIA H200", 10, estimate_tokens)[0].content == prompt


def test_refinement_carries_code_summary_verdict_in_order_never_reasoning() -> None:
    text = build_messages(TASK, history(), "NVIDIA H200", 100_000, estimate_tokens)[0].content
    assert EXAMPLE_MODEL_NEW not in text  # the example is turn 0 only
    assert "SECRET-REASONING" not in text
    assert text.rstrip().endswith(RESTART_INSTRUCTION)
    order = [text.index(s) for s in (
        PREVIOUS_ATTEMPTS_INTRO, "### Attempt 1", "cut off at the limit", "### Attempt 2",
        "# turn 1", "Fused relu", "blockDimx", "### Attempt 3", "# turn 2", "float4", "0.87x",
    )]
    assert order == sorted(order)
    assert "(no code could be extracted from your answer)" in text
    assert attempts_in_prompt(text) == 3


def test_budget_drops_earliest_attempts_first() -> None:
    full = build_messages(TASK, history(), "GPU", 100_000, estimate_tokens)[0].content
    without_first = build_messages(TASK, history()[1:], "GPU", 100_000, estimate_tokens)[0].content
    budget = estimate_tokens(without_first) + 40  # room for the "omitted" note, not for attempt 1
    assert estimate_tokens(full) > budget
    text = build_messages(TASK, history(), "GPU", budget, estimate_tokens)[0].content
    assert estimate_tokens(text) <= budget
    assert "### Attempt 1" not in text and "cut off at the limit" not in text
    assert "### Attempt 2" in text and "### Attempt 3" in text
    assert "(1 earlier attempt omitted for length.)" in text
    assert attempts_in_prompt(text) == 3  # the turn index survives trimming


def test_tiny_budget_keeps_the_latest_attempt() -> None:
    text = build_messages(TASK, history(), "GPU", 10, estimate_tokens)[0].content
    assert "### Attempt 3" in text and "### Attempt 2" not in text
    assert "(2 earlier attempts omitted for length.)" in text


def test_budget_counts_with_the_given_counter() -> None:
    calls: list[int] = []

    def words(text: str) -> int:
        calls.append(1)
        return len(text.split())

    full = build_messages(TASK, history(), "GPU", 10**6, words)[0].content
    trimmed = build_messages(TASK, history(), "GPU", len(full.split()) - 1, words)[0].content
    assert calls and "### Attempt 1" not in trimmed and "### Attempt 2" in trimmed


def test_target_gpu_name_order() -> None:
    assert target_gpu_name("NVIDIA B200", "ignored") == "NVIDIA B200"
    import torch

    if torch.cuda.is_available():
        expected = torch.cuda.get_device_name(torch.cuda.current_device())
        assert target_gpu_name(None, "from settings") == expected
    else:
        assert target_gpu_name(None, "NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3"
        assert target_gpu_name(None, None) == FALLBACK_GPU_NAME == "an NVIDIA GPU"


def test_example_answer_is_a_parseable_model_new_block() -> None:
    blocks = find_code_blocks(turn0_prompt(TASK, "GPU"))
    example = [b for b in blocks if b.defines_model_new]
    assert len(example) == 1 and example[0].code == EXAMPLE_MODEL_NEW and example[0].closed


def test_example_model_runs_and_matches_its_docstring_shape() -> None:
    namespace: dict = {}
    exec(compile(EXAMPLE_MODEL.replace('device="cuda"', 'device="cpu"'), "example", "exec"), namespace)
    a, b = namespace["get_inputs"]()
    out = namespace["Model"](*namespace["get_init_inputs"]())(a, b)
    assert out.shape == (4096, 1024) and bool(((a + b) == out).all())


@pytest.mark.nvcc
def test_example_answer_compiles_with_nvcc(tmp_path: Path) -> None:
    """The one-shot example we show the model is real code: its extension builds."""
    script = tmp_path / "build_example.py"
    source = EXAMPLE_MODEL_NEW.replace("verbose=False,", f"verbose=False, build_directory={str(tmp_path)!r},")
    script.write_text(source + "\nprint('BUILT', type(add_extension).__name__)\n")
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                          timeout=580)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "BUILT module" in proc.stdout


KERNELBENCH_FILE = TASK_SOURCE


def test_kevin_prompt_command(tmp_path: Path) -> None:
    task_file = tmp_path / "scaled_relu.py"
    task_file.write_text(KERNELBENCH_FILE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEVIN_")}
    proc = subprocess.run(
        [sys.executable, "-m", "kevin_agent", "prompt", f"{task_file}::Model", "--gpu", "NVIDIA H200"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("You are given the following architecture:")
    assert "return torch.relu(x) * self.scale" in proc.stdout
    assert "The target GPU is: NVIDIA H200" in proc.stdout
    assert EXAMPLE_MODEL_NEW in proc.stdout


def test_kevin_prompt_uses_configured_gpu_and_reports_bad_task(tmp_path: Path) -> None:
    (tmp_path / "kevin.toml").write_text('target_gpu = "NVIDIA L40S"\n')
    task_file = tmp_path / "scaled_relu.py"
    task_file.write_text(KERNELBENCH_FILE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEVIN_")}
    proc = subprocess.run([sys.executable, "-m", "kevin_agent", "prompt", f"{task_file}::Model"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    import torch

    if not torch.cuda.is_available():
        assert "The target GPU is: NVIDIA L40S" in proc.stdout
    missing = subprocess.run([sys.executable, "-m", "kevin_agent", "prompt", "nope.py::Model"],
                             capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert missing.returncode == 2 and missing.stdout == ""
    assert len(missing.stderr.strip().splitlines()) == 1 and "Traceback" not in missing.stderr
