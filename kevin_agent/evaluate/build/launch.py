"""Kernel launches (``k<<<grid, block[, smem[, stream]]>>>(args)``) and the launchers that replace them.

Host code that uses torch moves to a g++-compiled .cpp, where ``<<<...>>>`` cannot appear; each
launch becomes a call of a generated ``kevin_launch_<kernel>`` defined in the .cu. Its parameters
copy the kernel's declared types, so arguments convert exactly as at the original launch, and a
launch without a stream still goes to the legacy default stream 0. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kevin_agent.evaluate.build.chunks import IDENT, SplitRefused

# Types that AT_DISPATCH_* binds to ``scalar_t``, for the macros whose types exist without torch.
DISPATCH_TYPES = {
    "AT_DISPATCH_FLOATING_TYPES": ("float", "double"),
    "AT_DISPATCH_INTEGRAL_TYPES": ("uint8_t", "int8_t", "int16_t", "int32_t", "int64_t"),
    "AT_DISPATCH_ALL_TYPES": ("float", "double", "uint8_t", "int8_t", "int16_t", "int32_t", "int64_t"),
}
PLAIN_TYPE_ARG = re.compile(
    r"^(?:(?:unsigned|signed|const)\s+)*(?:float|double|int|long|short|char|bool|size_t|u?int(?:8|16|32|64)_t"
    r"|__half2?|half2?|__nv_bfloat162?|(?:float|int|uint|double)[1-4])(?:\s*\*)*$|^-?\d+[uUlL]*$|^true$|^false$"
)


@dataclass
class Launch:
    """One launch inside a chunk (offsets into the chunk's text)."""

    start: int
    end: int
    kernel: str
    template_args: str | None
    config: list[str]
    args: str
    dispatch: str | None  # enclosing AT_DISPATCH_* macro, if any


@dataclass
class KernelSignature:
    name: str
    template_params: str | None  # text inside template<...>
    template_names: list[str]
    param_types: list[str]


def split_top_level(text: str, sep: str = ",", angle: bool = False) -> list[str]:
    parts, depth, start = [], 0, 0
    opens, closes = ("([{<", ")]}>") if angle else ("([{", ")]}")
    for i, ch in enumerate(text):
        if ch in opens:
            depth += 1
        elif ch in closes:
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _match_forward(code: str, i: int, open_ch: str, close_ch: str) -> int:
    """Index of the bracket closing the one at ``i``."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == open_ch:
            depth += 1
        elif code[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j
    raise SplitRefused("unbalanced brackets in a kernel launch")


# Bounds checked before any work on a launch: real launches are a few dozen characters, and a
# scan past them (template arguments read backwards, a configuration to its ">>>") over a source of
# thousands of launches would make the parent's work quadratic in the candidate's text.
MAX_TEMPLATE_ARGS = 4096
MAX_CONFIG = 4096


def matching_parens(code: str) -> dict[int, int]:
    """The index of the ``)`` closing each ``(`` of ``code`` (unclosed ones left out), in one pass."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for match in re.finditer(r"[()]", code):
        if match.group() == "(":
            stack.append(match.start())
        elif stack:
            pairs[stack.pop()] = match.start()
    return pairs


def _dispatch_spans(code: str, pairs: dict[int, int]) -> list[tuple[int, int, str]]:
    """(start, close, macro) of every ``AT_DISPATCH_*(...)`` in ``code``, in order of start."""
    spans = []
    for match in re.finditer(r"\b(AT_DISPATCH_\w+)\s*\(", code):
        close = pairs.get(match.end() - 1)
        if close is None:
            raise SplitRefused("unbalanced brackets in a kernel launch")
        spans.append((match.start(), close, match.group(1)))
    return spans


class _Enclosing:
    """The innermost AT_DISPATCH_* macro around each launch, for launches asked in order of
    position: one sweep over the macros (they nest like the brackets they are made of)."""

    def __init__(self, spans: list[tuple[int, int, str]]) -> None:
        self.spans, self.next, self.open = spans, 0, []  # type: ignore[var-annotated]

    def at(self, pos: int) -> str | None:
        while self.next < len(self.spans) and self.spans[self.next][0] < pos:
            self.open.append(self.spans[self.next])
            self.next += 1
        while self.open and self.open[-1][1] <= pos:
            self.open.pop()
        inner = [span for span in self.open[-1:] if span[1] > pos]
        return inner[0][2] if inner else None


def find_launches(text: str, code: str) -> list[Launch]:
    """All launches in a chunk; ``code`` is the chunk with comments and literals blanked. Linear in
    the chunk: brackets are paired once, each launch's own text is read a bounded number of times."""
    launches: list[Launch] = []
    pairs = matching_parens(code)
    enclosing = _Enclosing(_dispatch_spans(code, pairs))
    for match in re.finditer(r"<<<", code):
        p = match.start()
        if launches and p < launches[-1].end:
            raise SplitRefused("a kernel launch inside another launch")
        j, template_args = _template_args_before(code, p)
        end_name = j + 1
        while j >= 0 and (code[j].isalnum() or code[j] == "_"):
            j -= 1
        name = code[j + 1 : end_name]
        if not IDENT.fullmatch(name or "-") or code[max(0, j - 1) : j + 1] in ("::", "->") or code[j : j + 1] == ".":
            raise SplitRefused("kernel launch of a qualified or computed kernel name")
        close_cfg = code.find(">>>", p + 3, p + 3 + MAX_CONFIG)
        if close_cfg < 0:
            raise SplitRefused(f"kernel launch without >>> in the {MAX_CONFIG} characters after <<<")
        config = split_top_level(code[p + 3 : close_cfg])
        if not 2 <= len(config) <= 4 or not all(config):
            raise SplitRefused("kernel launch configuration is not <<<grid, block[, smem[, stream]]>>>")
        k = close_cfg + 3
        while k < len(code) and code[k].isspace():
            k += 1
        if k >= len(code) or code[k] != "(" or k not in pairs:
            raise SplitRefused("kernel launch without an argument list")
        close_args = pairs[k]
        launches.append(
            Launch(
                start=j + 1, end=close_args + 1, kernel=name, template_args=template_args,
                config=_original_parts(text, code, p + 3, close_cfg),
                args=text[k + 1 : close_args], dispatch=enclosing.at(p),
            )
        )
    return launches


def _template_args_before(code: str, p: int) -> tuple[int, str | None]:
    """(index of the last character of the kernel's name, its template arguments or None) for the
    launch whose ``<<<`` is at ``p``; the arguments are read back at most MAX_TEMPLATE_ARGS."""
    j = p - 1
    while j >= 0 and code[j].isspace():
        j -= 1
    if j < 0 or code[j] != ">":
        return j, None
    depth, k, stop = 0, j, max(-1, j - MAX_TEMPLATE_ARGS)
    while k > stop:
        depth += {">": 1, "<": -1}.get(code[k], 0)
        if depth == 0:
            break
        k -= 1
    if k <= stop:
        raise SplitRefused("unreadable template arguments at a kernel launch")
    template_args = code[k + 1 : j].strip()
    j = k - 1
    while j >= 0 and code[j].isspace():
        j -= 1
    return j, template_args


def _original_parts(text: str, code: str, start: int, end: int) -> list[str]:
    """Split ``text[start:end]`` on the top-level commas found in the blanked ``code``."""
    pieces, depth, last = [], 0, start
    for i in range(start, end):
        ch = code[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            pieces.append(text[last:i].strip())
            last = i + 1
    pieces.append(text[last:end].strip())
    return pieces


def kernel_signature(code: str, name: str) -> KernelSignature:
    """Template parameters and parameter types of the kernel whose chunk is ``code``."""
    code = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", code)
    template_params = None
    template_names: list[str] = []
    t = re.match(r"\s*template\s*<", code)
    if t:
        close = _match_angle(code, t.end() - 1)
        template_params = code[t.end() : close].strip()
        for param in split_top_level(template_params, angle=True):
            decl = param.split("=")[0].strip()
            ident = re.search(r"\b([A-Za-z_]\w*)\s*$", decl)
            if not ident or "..." in decl:
                raise SplitRefused(f"kernel '{name}' has template parameters the launcher cannot copy")
            template_names.append(ident.group(1))
    m = re.search(r"\b" + re.escape(name) + r"\s*\(", code)
    if not m:
        raise SplitRefused(f"cannot read the parameters of kernel '{name}'")
    close = _match_forward(code, m.end() - 1, "(", ")")
    params = split_top_level(code[m.end() : close], angle=True)
    types: list[str] = []
    if params != [""] and params != ["void"]:
        for param in params:
            if any(c in param for c in "[=(") or "..." in param:
                raise SplitRefused(f"kernel '{name}' has a parameter the launcher cannot copy: {param}")
            ident = re.search(r"\b([A-Za-z_]\w*)\s*$", param)
            type_text = param[: ident.start()].strip() if ident else ""
            if not ident or not IDENT.search(type_text) or type_text.endswith("::"):
                raise SplitRefused(f"kernel '{name}' has an unnamed parameter: {param}")
            types.append(" ".join(type_text.split()))
    return KernelSignature(name, template_params, template_names, types)


def _match_angle(code: str, i: int) -> int:
    depth = 0
    for j in range(i, len(code)):
        depth += {"<": 1, ">": -1}.get(code[j], 0)
        if depth == 0:
            return j
    raise SplitRefused("unbalanced template brackets")


def launcher_name(kernel: str) -> str:
    return f"kevin_launch_{kernel}"


def _launcher_params(sig: KernelSignature, types: list[str], named: bool) -> str:
    head = ["dim3 kevin_grid", "dim3 kevin_block", "size_t kevin_smem", "cudaStream_t kevin_stream"]
    if not named:
        head = ["dim3", "dim3", "size_t", "cudaStream_t"]
    return ", ".join(head + [f"{t} kevin_a{i}" if named else t for i, t in enumerate(types)])


def launcher_definition(sig: KernelSignature) -> str:
    """The .cu definition of the launcher for one kernel."""
    template = f"template <{sig.template_params}>\n" if sig.template_params is not None else ""
    targs = f"<{', '.join(sig.template_names)}>" if sig.template_params is not None else ""
    call_args = ", ".join(f"kevin_a{i}" for i in range(len(sig.param_types)))
    return (
        f"{template}void {launcher_name(sig.name)}({_launcher_params(sig, sig.param_types, True)}) {{\n"
        f"  {sig.name}{targs}<<<kevin_grid, kevin_block, kevin_smem, kevin_stream>>>({call_args});\n}}\n"
    )


def launcher_declaration(sig: KernelSignature) -> str:
    """The .cpp declaration of the launcher (one line)."""
    template = f"template <{sig.template_params}> " if sig.template_params is not None else ""
    return f"{template}void {launcher_name(sig.name)}({_launcher_params(sig, sig.param_types, False)});"


def launcher_instantiation(sig: KernelSignature, args: list[str]) -> str:
    """Explicit instantiation of a template launcher for concrete template arguments."""
    mapping = dict(zip(sig.template_names, args))
    types = [re.sub(r"\b[A-Za-z_]\w*\b", lambda m: mapping.get(m.group(0), m.group(0)), t) for t in sig.param_types]
    return f"template void {launcher_name(sig.name)}<{', '.join(args)}>({_launcher_params(sig, types, False)});"


def rewrite_launch(text: str, launch: Launch) -> str:
    """The call replacing one launch; the kernel arguments stay on their original lines."""
    config = launch.config + ["0"] * (4 - len(launch.config))
    targs = f"<{launch.template_args}>" if launch.template_args is not None else ""
    prefix = f"{launcher_name(launch.kernel)}{targs}({', '.join(config)}"
    if launch.args.strip():
        prefix += ", "
    before_args = text[launch.start : launch.end - 1 - len(launch.args)].count("\n")
    prefix += "\n" * max(0, before_args - prefix.count("\n"))
    return prefix + launch.args + ")"


def concrete_template_args(launch: Launch, visible: set[str]) -> list[list[str]]:
    """The template argument lists to instantiate for one launch (one per dispatched type)."""
    assert launch.template_args is not None
    args = split_top_level(launch.template_args, angle=True)
    variants: list[list[str]] = [[]]
    for arg in args:
        if arg == "scalar_t":
            types = DISPATCH_TYPES.get(launch.dispatch or "")
            if types is None:
                raise SplitRefused(
                    f"kernel '{launch.kernel}' is launched with scalar_t "
                    + (f"inside {launch.dispatch}, which dispatches over torch-only types" if launch.dispatch
                       else "outside a supported AT_DISPATCH macro")
                )
            variants = [v + [t] for v in variants for t in types]
        elif PLAIN_TYPE_ARG.match(arg) or (IDENT.fullmatch(arg) and arg in visible):
            variants = [v + [arg] for v in variants]
        else:
            raise SplitRefused(f"template argument '{arg}' of kernel '{launch.kernel}' "
                               "is not visible to the kernel file")
    return variants
