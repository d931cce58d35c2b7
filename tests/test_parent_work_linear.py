"""The parent's own work on a candidate's text grows with its size, not with its square.

Each pathological source is timed (CPU time of this process) against a plain source of about the
same size, through the split build (``split_cuda_source``: chunks, launch scanning, rewriting,
name declaration) and the static checks (``static_verdict``). A ratio, not a wall-clock limit:
a slower machine slows both. Measured before the fix (same machine): 2 000 launches 61x the
plain source, 2 000 launches inside AT_DISPATCH 306x, 8 000 launches 184x, and minutes for
150 000 functions declared against every chunk; after it, 2x at most.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from kevin_agent.evaluate.build.chunks import SplitRefused
from kevin_agent.evaluate.build.split import split_cuda_source

KERNEL = ("__global__ void k(float* y) { y[0] = 1.0f; }\n"
          "template <typename T> __global__ void kt(T* y) { y[0] = 1; }\n")
HOST = "torch::Tensor fwd(torch::Tensor x) {\n    float* p = x.data_ptr<float>();\n    int s = 0;\n"


def launches(n: int) -> str:
    return KERNEL + HOST + "    k<<<1, 1>>>(p);\n" * n + "    return x;\n}\n"


def dispatched(n: int) -> str:
    body = "        kt<scalar_t><<<1, 1>>>(x.data_ptr<scalar_t>());\n" * n
    return (KERNEL + HOST + "    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), \"f\", ([&] {\n" + body
            + "    }));\n    return x;\n}\n")


def functions(n: int) -> str:
    """``n`` small host functions, each defined in the kernel file and named by torch code."""
    defined = "".join(f"int g{i}(){{return {i};}}\n" for i in range(n))
    return KERNEL + defined + HOST + "".join(f"s+=g{i}();\n" for i in range(n)) + "    return x;\n}\n"


def plain(size: int) -> str:
    line = "    s = s * 3 + 1;\n"
    return KERNEL + HOST + line * (size // len(line)) + "    return x;\n}\n"


def cpu_seconds(work: Callable[[], object]) -> float:
    start = time.process_time()
    try:
        work()
    except SplitRefused:
        pass
    return time.process_time() - start


def ratio(source: str, work: Callable[[str], object]) -> float:
    """CPU time on ``source`` over CPU time on a plain source of its size (best of two each below
    a megabyte, one each above: a few CPU-seconds in all)."""
    tries = 2 if len(source) < 1_000_000 else 1
    hostile = min(cpu_seconds(lambda: work(source)) for _ in range(tries))
    baseline = min(cpu_seconds(lambda: work(plain(len(source)))) for _ in range(tries))
    return hostile / max(baseline, 0.01)


CASES = {
    "2000 launches": launches(1990),
    "2000 launches in AT_DISPATCH": dispatched(1990),
    "66 000 launches": launches(66_000),
    "20 000 functions named by torch code": functions(19_000),
    "150 000 functions": functions(150_000),
}


@pytest.mark.parametrize("case", CASES)
def test_splitting_a_hostile_source_costs_what_a_plain_one_does(case):
    assert ratio(CASES[case], split_cuda_source) < 6


def test_a_hostile_source_under_the_counts_is_still_split():
    """The counts are bounds, not the fix: below them the work is done, linearly."""
    sources = split_cuda_source(dispatched(1990))
    assert sources.host_cpp.count("kevin_launch_kt<scalar_t>(") == 1990
    assert split_cuda_source(functions(19_000)).host_cpp.count("int g18999();") == 1


@pytest.mark.parametrize("count, refused", [(1999, False), (2001, True)])
def test_the_launch_count_is_checked_before_the_work(count, refused):
    try:
        split_cuda_source(launches(count))
        said = ""
    except SplitRefused as exc:
        said = str(exc)
    assert ("more than 2000 kernel launches" in said) is refused


def _candidate(cuda: str) -> str:
    return ("import torch\nfrom torch.utils.cpp_extension import load_inline\nsrc = r'''\n" + cuda + "'''\n"
            "ext = load_inline(name='e', cpp_sources='torch::Tensor fwd(torch::Tensor x);', cuda_sources=src,"
            " functions=['fwd'])\n")


@pytest.mark.parametrize("case", ["2000 launches in AT_DISPATCH", "20 000 functions named by torch code"])
def test_the_static_checks_on_a_hostile_source_cost_what_a_plain_one_does(case):
    from kevin_agent.evaluate.verdicts import static_verdict

    hostile = min(cpu_seconds(lambda: static_verdict(_candidate(CASES[case]))) for _ in range(2))
    baseline = min(cpu_seconds(lambda: static_verdict(_candidate(plain(len(CASES[case]))))) for _ in range(2))
    assert hostile / max(baseline, 0.01) < 6
