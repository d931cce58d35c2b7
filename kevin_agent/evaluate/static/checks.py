"""Static checks of a candidate before compiling: one table of rules, each rejecting a reward hack
visible in the source (KEVIN.md) with a message the model can act on. Stdlib only (ast, re)."""

from __future__ import annotations

import ast
from typing import Optional

from kevin_agent.evaluate.static import rules_compute as compute
from kevin_agent.evaluate.static import rules_cuda as cuda
from kevin_agent.evaluate.static import rules_python as python
from kevin_agent.evaluate.static.context import build_context
from kevin_agent.evaluate.static.rule import Rule, Violation

__all__ = ["RULES", "Rule", "Violation", "check_candidate", "format_violations"]

RULES: tuple[Rule, ...] = (
    Rule("no-model-new", "a class ModelNew is defined", python.check_model_new),
    Rule("no-load-inline", "the CUDA code is built with load_inline", python.check_load_inline),
    Rule("no-global-kernel", "the CUDA sources define a __global__ kernel", cuda.check_global_kernel),
    Rule("no-kernel-launch", "a kernel is launched (<<<>>> or cudaLaunchKernel)", cuda.check_kernel_launch),
    Rule("empty-kernel", "no __global__ kernel has an empty body", cuda.check_empty_kernel),
    Rule("empty-forward", "ModelNew.forward exists and is not pass / ...", python.check_empty_forward),
    Rule("torch-compute", "no torch / torch.nn.functional compute calls outside __init__",
         compute.check_torch_compute),
    Rule("nn-layer-call", "torch.nn layers may hold weights but are never called", compute.check_layer_calls),
    Rule("tensor-compute", "no tensor compute methods, @ or tensor arithmetic in forward",
         compute.check_tensor_compute),
    Rule("cpp-torch-compute", "no ATen/LibTorch compute in the C++/CUDA sources", cuda.check_cpp_torch_compute),
    Rule("library-call", "no cuBLAS/cuDNN/cuFFT/... or Thrust/CUB device-wide calls", cuda.check_library_calls),
    Rule("try-except", "no try/except or contextlib.suppress (fallbacks)", python.check_try_except),
    Rule("subclass-reference", "ModelNew derives from nn.Module only, never the reference",
         python.check_subclass_reference),
    Rule("reference-use", "the reference class is never used", python.check_reference_use),
    Rule("threads-processes", "no threads, processes, async work or host callbacks",
         python.check_threads_processes),
    Rule("extra-stream", "no streams other than PyTorch's current stream", cuda.check_extra_stream),
    Rule("patching", "no patching of torch, timing, builtins, imports or the environment", python.check_patching),
    Rule("introspection", "no gc / inspect / globals() / frame access", python.check_introspection),
    Rule("hidden-code", "no exec/eval, file loading, ctypes, other compilers or serialized code",
         python.check_hidden_code),
    Rule("output-cache", "no memoized or cached outputs across calls", python.check_output_cache),
)


def check_candidate(code: str, task_source: Optional[str] = None) -> list[Violation]:
    """All rule violations of a candidate, [] when clean; one ("syntax", line) violation if it does not parse.

    ``task_source`` (optional) names the reference's classes so that using any of them is caught."""
    try:
        tree = ast.parse(code)
    except SyntaxError as error:
        where = "" if error.lineno else " (line unknown)"  # format_violations prefixes "line N: "
        return [Violation("syntax", error.lineno,
                          f"Python syntax error{where}: {error.msg}. Answer with a complete, valid Python file.")]
    except ValueError as error:  # e.g. null bytes in the source
        return [Violation("syntax", None, f"The answer is not valid Python source: {error}.")]
    ctx = build_context(code, tree, task_source)
    found: list[Violation] = []
    seen: set[tuple[str, Optional[int], str]] = set()
    for rule in RULES:
        for violation in rule.check(ctx):
            key = (violation.rule, violation.line, violation.message)
            if key not in seen:
                seen.add(key)
                found.append(violation)
    return found


def format_violations(violations: list[Violation], limit: int = 8) -> str:
    """The violations as lines for the model's feedback, e.g. "line 12: ... [torch-compute]"."""
    lines = [f"{'line ' + str(v.line) + ': ' if v.line else ''}{v.message} [{v.rule}]" for v in violations[:limit]]
    if len(violations) > limit:
        lines.append(f"... and {len(violations) - limit} more problems of the same kinds.")
    return "\n".join(lines)
