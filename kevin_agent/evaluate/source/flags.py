"""The compiler and linker flags, and the path arguments, a candidate's load_inline call may use.

An allow-list of what real kernels pass (optimisation levels, fast math, ``-D``/``-U``, ``-std``,
``-arch``/``-gencode``, ``-lineinfo``, ptxas verbosity, a known set of CUDA libraries...): every
other flag is refused by name, before anything is compiled (the static stage when the arguments
are literals, ``BuildCache.build`` for every spec, however it was found). Flags that make a
compiler run a program, read or write a file of their choosing (``-wrapper``, ``-MF``,
``-include``, ``-ccbin``, ``--keep``, ``-Wl,...``, ``-B``, ``-specs``, ``@file``, linker scripts,
absolute paths) never reach a compiler. A flag or path with any character but printable ASCII (a
control character, a line break inside one flag, a look-alike dash) is refused whole: it would
reach the build file and the compile log as written. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping

FLAG_ARGUMENTS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags")
PATH_ARGUMENTS = ("extra_include_paths", "build_directory")
DOC = "see docs/build.md, 'Flags a candidate may pass'"

_MACRO = r"[A-Za-z_]\w*(?:\([\w\s,.]*\))?(?:=[^\s]*)?"
_REL_PATH = r"(?!/)(?!.*(?:^|/)\.\.(?:/|$))[\w.+/-]+"
_STD = r"(?:c|gnu)\+\+(?:11|14|17|20|23|1z|2a|2b)"
# g++ flags for the candidate's host code (also what nvcc may pass on with -Xcompiler)
HOST_FLAGS = re.compile("|".join((
    r"-O[0-3sgz]?|-Ofast", r"-f(?:no-)?(?:fast-math|unroll-loops|strict-aliasing|finite-math-only|PIC|pic"
    r"|omit-frame-pointer|tree-vectorize|math-errno|exceptions|rtti|inline-functions|signed-zeros)",
    r"-march=[\w-]+|-mtune=[\w-]+|-m(?:no-)?(?:avx\w*|sse\w*|fma|f16c|bmi2?)",
    r"-g[0-3]?|-w|-W(?:all|extra|pedantic)|-Wno-[\w-]+(?:=\w+)?|-pedantic",
    rf"-std={_STD}", rf"-D{_MACRO}", r"-U[A-Za-z_]\w*", r"-DNDEBUG",
)))
_ARCH = r"(?:(?:sm|compute|lto)_\d+[af]?|native|all|all-major)"
_PTXAS_OPTION = re.compile(r"-v|--verbose|-O[0-3]|--?warn-on-spills|--?warn-on-local-memory-usage|--?warn-lmem-usage"
                           r"|--?warn-spills"
                           r"|--?allow-expensive-optimizations(?:=(?:true|false))?|-dlcm=c[ag]|-dscm=(?:wt|cg|cs)"
                           r"|--?maxrregcount=\d+|-Werror")
_CUDAFE_OPTION = re.compile(r"--diag_suppress=[\w,]+|--display_error_number")
NVCC_FLAGS = re.compile("|".join((
    r"-O[0-3]", r"--?use_fast_math", r"--?(?:ftz|prec-div|prec-sqrt|fmad)=(?:true|false)",
    r"-lineinfo|--generate-line-info", r"--?(?:expt-relaxed-constexpr|expt-extended-lambda|extended-lambda)",
    rf"-std={_STD}", rf"-D{_MACRO}", r"-U[A-Za-z_]\w*",
    rf"-arch={_ARCH}|--gpu-architecture={_ARCH}|-code=(?:{_ARCH},?)+|--gpu-code=(?:{_ARCH},?)+",
    rf"(?:-gencode=|--generate-code=)arch={_ARCH},code=(?:\[?(?:{_ARCH},?)+\]?)",
    r"--?maxrregcount=\d+", r"-res-usage|--resource-usage", r"--restrict|-restrict",
    r"-w|--disable-warnings|-Wno-deprecated-gpu-targets|-Wno-deprecated-declarations|-Werror=[\w-]+",
    r"--diag-suppress=[\w,]+|-diag-suppress=[\w,]+", r"-g|-G|--device-debug|--debug",
    r"-t\d+|--threads=\d+", r"-DNDEBUG", r"--display-error-number", r"--extra-device-vectorization",
)))
# nvcc options whose value is the next argument (or joined with '='): value checked by its own table
_NVCC_WITH_VALUE = {
    "-Xptxas": _PTXAS_OPTION, "--ptxas-options": _PTXAS_OPTION,
    "-Xcompiler": HOST_FLAGS, "--compiler-options": HOST_FLAGS,
    "-Xcudafe": _CUDAFE_OPTION, "--cudafe-options": _CUDAFE_OPTION,
}
_NVCC_SPLIT = {"-arch": "-arch=", "--gpu-architecture": "-arch=", "-gencode": "-gencode=",
               "--generate-code": "-gencode=", "-maxrregcount": "-maxrregcount=", "--maxrregcount": "-maxrregcount=",
               "-code": "-code=", "-t": "-t", "--threads": "--threads=", "-D": "-D", "-U": "-U", "-I": "-I",
               "-std": "-std="}
_HOST_SPLIT = {"-D": "-D", "-U": "-U", "-I": "-I"}
# Libraries a kernel may link (CUDA's own and torch's, all already on the library path)
CUDA_LIBRARIES = frozenset({
    "cublas", "cublasLt", "cusparse", "cusparseLt", "curand", "cufft", "cufftw", "cudnn", "cusolver",
    "cuda", "cudart", "nvrtc", "nvToolsExt", "nvtx3interop", "nvJitLink", "cudadevrt",
    "c10", "c10_cuda", "torch", "torch_cpu", "torch_cuda", "torch_python",
})
_CUDA_LIBDIR = re.compile(r"/usr/local/cuda(?:-[\d.]+)?/(?:lib64|lib|targets/[\w-]+/lib)(?:/stubs)?/?")
LINK_FLAGS = re.compile(rf"-l(?:{'|'.join(sorted(CUDA_LIBRARIES, key=len, reverse=True))})"
                        rf"|-L{_CUDA_LIBDIR.pattern}|-Wl,--(?:no-)?as-needed|-O[0-3]|-g|-s")
_LINK_SPLIT = {"-l": "-l", "-L": "-L"}


def _tokens(flags: Iterable[str]) -> list[str]:
    """The flags as a compiler sees them once split on white space (load_inline joins them so)."""
    return [token for flag in flags for token in str(flag).split()]


def _joined(tokens: list[str], split: Mapping[str, str]) -> Iterator[str]:
    """Tokens with a separate value (``-D X``, ``-arch sm_90``) joined into one (``-DX``)."""
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in split and i + 1 < len(tokens):
            yield split[token] + tokens[i + 1]
            i += 2
        else:
            yield token
            i += 1


def _allowed(token: str, table: re.Pattern[str]) -> bool:
    """``token`` matches ``table``, or is ``-I`` of a folder inside the build's own folder."""
    if token.startswith("-I"):
        return not include_path_problems([token[2:]])
    return bool(table.fullmatch(token))


def _refused(tokens: Iterable[str], allowed: Callable[[str], bool]) -> list[str]:
    """The tokens not ``allowed``; a refused flag's own values (the tokens after it that are not
    flags) are named with it: ``-wrapper /bin/sh,-c,...`` is one problem, not two."""
    bad: list[str] = []
    follows = False
    for token in tokens:
        if allowed(token):
            follows = False
        elif follows and not token.startswith("-"):
            bad[-1] += " " + token
        else:
            bad.append(token)
            follows = True
    return bad


def host_flag_problems(flags: Iterable[str]) -> list[str]:
    """The g++ flags (extra_cflags) that are not allowed."""
    return _refused(_joined(_tokens(flags), _HOST_SPLIT), lambda t: _allowed(t, HOST_FLAGS))


def _nvcc_value_ok(option: str, value: str) -> bool:
    table = _NVCC_WITH_VALUE[option]
    parts = value.split(",")
    return bool(value) and all(part and _allowed(part, table) for part in parts)


def _nvcc_units(tokens: list[str]) -> Iterator[tuple[str, bool]]:
    """(flag as nvcc reads it, allowed) with option values joined: ``-Xptxas -v``, ``-arch=sm_90``."""
    i = 0
    while i < len(tokens):
        token = tokens[i]
        option, eq, value = token.partition("=")
        if option in _NVCC_WITH_VALUE:
            if not eq:  # the value is the next token
                value = tokens[i + 1] if i + 1 < len(tokens) else ""
                i += 1
            yield f"{option} {value}".strip(), _nvcc_value_ok(option, value)
        else:
            if token in _NVCC_SPLIT and i + 1 < len(tokens):
                i += 1
                token = _NVCC_SPLIT[token] + tokens[i]
            yield token, _allowed(token, NVCC_FLAGS)
        i += 1


def cuda_flag_problems(flags: Iterable[str]) -> list[str]:
    """The nvcc flags (extra_cuda_cflags) that are not allowed; ``-Xcompiler`` values are host flags."""
    units = dict.fromkeys(_nvcc_units(_tokens(flags)))  # keeps order
    verdict = {unit: ok for unit, ok in units}
    return _refused([unit for unit, _ in units], lambda unit: verdict[unit])


def link_flag_problems(flags: Iterable[str]) -> list[str]:
    """The linker flags (extra_ldflags) that are not allowed."""
    return _refused(_joined(_tokens(flags), _LINK_SPLIT), lambda t: bool(LINK_FLAGS.fullmatch(t)))


def include_path_problems(paths: Iterable[str]) -> list[str]:
    """extra_include_paths outside the build's own folder (absolute, ``..``, ``~``): not allowed."""
    return [str(p) for p in paths if not re.fullmatch(_REL_PATH, str(p))]


_CHECKS = {"extra_cflags": host_flag_problems, "extra_cuda_cflags": cuda_flag_problems,
           "extra_ldflags": link_flag_problems, "extra_include_paths": include_path_problems}
_WHY = {
    "extra_cflags": "host flags may be -O levels, fast math, -march/-m, -g, warnings, -std=, -D/-U, relative -I",
    "extra_cuda_cflags": "nvcc flags may be -O levels, --use_fast_math, -ftz/-prec-*/-fmad, -lineinfo, -std=, "
                         "-D/-U, -arch/-gencode, -maxrregcount, -Xptxas -v, --expt-relaxed-constexpr, "
                         "--extended-lambda, relative -I",
    "extra_ldflags": "link flags may be -l of CUDA and torch libraries (cublas, cublasLt, cusparse, curand, cufft, "
                     "cudnn, cusolver, cuda...) and -L of the CUDA toolkit's lib64",
    "extra_include_paths": "include paths must be relative to the build folder (no absolute paths, '..' or '~')",
}


def argument_problems(values: Mapping[str, object]) -> list[tuple[str, str]]:
    """(argument, one sentence) per refused flag or path of a load_inline call's arguments (name ->
    value); [] when everything is allowed. ``build_directory`` is refused outright."""
    found = []
    if values.get("build_directory") is not None:
        found.append(("build_directory", "The build_directory argument is not allowed (kevin-agent builds every "
                                         "extension in its own cache): remove it."))
    for name, check in _CHECKS.items():
        raw = values.get(name)
        items = (raw,) if isinstance(raw, str) else tuple(str(v) for v in raw or ())  # type: ignore[attr-defined]
        for item in (i for i in items if not plain_ascii(i)):
            found.append((name, f"The flag {_short(ascii(item))} in {name} has a character other than printable "
                                "ASCII (a control character, a line break inside one flag, a look-alike): remove it."))
        items = tuple(i for i in items if plain_ascii(i))
        for flag in check(items):
            found.append((name, f"The flag '{_short(flag)}' in {name} is not allowed ({_WHY[name]}; {DOC}): "
                                "remove it."))
    return found


def plain_ascii(text: str) -> bool:
    """Only printable ASCII and spaces: what a flag or path of a real build is made of."""
    return all(" " <= c <= "~" for c in text)


def _short(flag: str, limit: int = 80) -> str:
    return flag if len(flag) <= limit else flag[:limit] + "..."
