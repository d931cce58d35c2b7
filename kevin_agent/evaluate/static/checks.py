"""Static checks of a candidate before compiling: one table of rules. Stdlib only (ast, re).

Two kinds (issue 9): ``reject`` rules are certain from the source and cheap (syntax, no ModelNew,
no load_inline, no ``__global__`` kernel or launch, an empty kernel or forward) or protect the
evaluator itself (threads and processes, extra streams, patching, introspection, hidden code,
cached outputs); they fail the candidate before it is compiled. ``hint`` rules spell out where
PyTorch or a library probably does the module's work (torch calls, layer calls, tensor arithmetic,
ATen in C++, vendor libraries, try/except fallbacks, the reference class); they never reject:
the GPU profile decides (``evaluate.provenance``), and the hints go into the feedback of a
candidate that provenance rejects.
"""

from __future__ import annotations

import ast
from typing import Optional

from kevin_agent.evaluate.static import rules_build as build
from kevin_agent.evaluate.static import rules_compute as compute
from kevin_agent.evaluate.static import rules_cuda as cuda
from kevin_agent.evaluate.static import rules_python as python
from kevin_agent.evaluate.static.context import build_context
from kevin_agent.evaluate.static.rule import HINT, REJECT, Rule, Violation

__all__ = ["HINT", "REJECT", "RULES", "Rule", "Violation", "check_all", "check_candidate", "format_violations",
           "hints_for"]

RULES: tuple[Rule, ...] = (
    Rule("no-model-new", "a class ModelNew is defined", python.check_model_new),
    Rule("no-load-inline", "the CUDA code is built with load_inline", python.check_load_inline),
    Rule("no-global-kernel", "the CUDA sources define a __global__ kernel", cuda.check_global_kernel),
    Rule("no-kernel-launch", "a kernel is launched (<<<>>> or cudaLaunchKernel)", cuda.check_kernel_launch),
    Rule("empty-kernel", "no __global__ kernel has an empty body", cuda.check_empty_kernel),
    Rule("empty-forward", "ModelNew.forward exists and is not pass / ...", python.check_empty_forward),
    Rule("torch-compute", "torch / torch.nn.functional compute calls outside __init__",
         compute.check_torch_compute, HINT),
    Rule("nn-layer-call", "calls of torch.nn layers (holding weights is fine)", compute.check_layer_calls, HINT),
    Rule("tensor-compute", "tensor compute methods, @ or tensor arithmetic in forward",
         compute.check_tensor_compute, HINT),
    Rule("cpp-torch-compute", "ATen/LibTorch compute in the C++/CUDA sources", cuda.check_cpp_torch_compute, HINT),
    Rule("library-call", "cuBLAS/cuDNN/cuFFT/... or Thrust/CUB device-wide calls", cuda.check_library_calls, HINT),
    Rule("try-except", "try/except or contextlib.suppress (fallbacks)", python.check_try_except, HINT),
    Rule("subclass-reference", "ModelNew derives from something other than nn.Module",
         python.check_subclass_reference, HINT),
    Rule("reference-use", "the reference class is used", python.check_reference_use, HINT),
    Rule("threads-processes", "no threads, processes, async work or host callbacks",
         python.check_threads_processes),
    Rule("extra-stream", "no streams other than PyTorch's current stream", cuda.check_extra_stream),
    Rule("patching", "no patching of torch, timing, builtins, imports or the environment", python.check_patching),
    Rule("introspection", "no gc / inspect / globals() / frame access", python.check_introspection),
    Rule("hidden-code", "no exec/eval, file loading, ctypes, other compilers or serialized code",
         python.check_hidden_code),
    Rule("output-cache", "no memoized or cached outputs across calls", python.check_output_cache),
    Rule("source-size", "the file is at most 1 MB and its constant expressions fold within bounds",
         build.check_constant_sizes),
    Rule("build-flags", "load_inline flags and paths on the allow-list (no -wrapper, -MF, -include, absolute "
         "paths, build_directory...)", build.check_build_arguments),
)


TOO_DEEP = Violation("source-size", None, "The answer nests expressions too deeply to be checked (a chain of "
                     "hundreds of operators, calls or attributes): write flat code.")


def check_all(code: str, task_source: Optional[str] = None) -> tuple[list[Violation], list[Violation]]:
    """(rejections, hints) of a candidate; one ("syntax", line) rejection if it does not parse, one
    ``TOO_DEEP`` rejection if it nests deeper than the parser or the checks' recursion reach (a
    900-term sum took the checks past Python's recursion limit: the judge itself raised).

    ``task_source`` (optional) names the reference's classes so that using any of them is caught."""
    too_large = build.source_too_large(code)
    if too_large is not None:
        return [too_large], []
    try:
        return _check_parsed(code, task_source)
    except (RecursionError, MemoryError):  # MemoryError: the parser's own stack overflowing
        return [TOO_DEEP], []


def _check_parsed(code: str, task_source: Optional[str]) -> tuple[list[Violation], list[Violation]]:
    try:
        tree = ast.parse(code)
    except SyntaxError as error:
        where = "" if error.lineno else " (line unknown)"  # format_violations prefixes "line N: "
        return [Violation("syntax", error.lineno,
                          f"Python syntax error{where}: {error.msg}. Answer with a complete, valid Python file.")], []
    except ValueError as error:  # e.g. null bytes in the source
        return [Violation("syntax", None, f"The answer is not valid Python source: {error}.")], []
    ctx = build_context(code, tree, task_source)
    found: dict[str, list[Violation]] = {REJECT: [], HINT: []}
    seen: set[tuple[str, Optional[int], str]] = set()
    for rule in RULES:
        for violation in rule.check(ctx):
            key = (violation.rule, violation.line, violation.message)
            if key not in seen:
                seen.add(key)
                found[rule.kind].append(violation)
    return found[REJECT], found[HINT]


def check_candidate(code: str, task_source: Optional[str] = None) -> list[Violation]:
    """The violations that reject a candidate ([] when it may be compiled)."""
    return check_all(code, task_source)[0]


def hints_for(code: str, task_source: Optional[str] = None) -> list[Violation]:
    """Where the source probably leaves the work to PyTorch or a library (never a rejection)."""
    return check_all(code, task_source)[1]


def format_violations(violations: list[Violation], limit: int = 8) -> str:
    """The violations as lines for the model's feedback, e.g. "line 12: ... [torch-compute]"."""
    lines = [f"{'line ' + str(v.line) + ': ' if v.line else ''}{v.message} [{v.rule}]" for v in violations[:limit]]
    if len(violations) > limit:
        lines.append(f"... and {len(violations) - limit} more problems of the same kinds.")
    return "\n".join(lines)
