"""Provenance facts of one build, read from the candidate's own objects and preprocessed
translation units before anything runs, and the policy's decision on them (docs/provenance.md).

``gather`` runs in a confined child (``facts_child``; the files are the candidate's compiler
output): per own object its imports (``SHN_UNDEF`` symbols of ``.symtab`` not defined by another
own object), any data placed in an executable section and the kernels it holds (``symbols``); per
preprocessed translation unit the ``__global__`` functions its own text defines and its inline
assembly outside device code (``origins``); the imports demangled, and the held kernels that no
own text defines. The facts are policy-independent and stored with the build; ``reasons`` decides
them under a policy in the parent (matching names only).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from kevin_agent.eval_modes import STRICT, Policy
from kevin_agent.evaluate.provenance import names as N
from kevin_agent.evaluate.provenance.demangle import demangle_many
from kevin_agent.evaluate.provenance.elf import SHT_SYMTAB, Elf, ElfError
from kevin_agent.evaluate.provenance.imports import import_problems
from kevin_agent.evaluate.provenance.origins import scan
from kevin_agent.evaluate.provenance.symbols import list_image

SHF_WRITE, SHF_EXECINSTR = 0x1, 0x4
STT_OBJECT, STT_TLS = 1, 6
MAX_IMPORTS = 20_000
MAX_IMPORT_NAME = 4096  # characters of one name kept (a longer one is judged as cut: not on the list)
NAMES_IN_MESSAGE = 6


def object_symbols(name: str, data: bytes) -> tuple[set[str], set[str], list[str]]:
    """(undefined names, defined global names, executable-data findings) of one relocatable object."""
    elf = Elf(data)
    undefined, defined, findings = set(), set(), []
    for section in elf.sections:
        if section.flags & SHF_WRITE and section.flags & SHF_EXECINSTR:
            findings.append(f"{name}: section {section.name[:80]} is both writable and executable")
        if section.name == ".note.GNU-stack" and section.flags & SHF_EXECINSTR:
            findings.append(f"{name}: asks for an executable stack")
    for symbol in elf.symbols(which=(SHT_SYMTAB,)):
        if symbol.shndx == 0:
            undefined.add(symbol.name[:MAX_IMPORT_NAME])
        elif symbol.bind in (1, 2):
            defined.add(symbol.name[:MAX_IMPORT_NAME])
        if symbol.type in (STT_OBJECT, STT_TLS) and 0 < symbol.shndx < len(elf.sections) and \
                elf.sections[symbol.shndx].flags & SHF_EXECINSTR:
            findings.append(f"{name}: data {symbol.name[:80]} placed in executable section "
                            f"{elf.sections[symbol.shndx].name[:40]}")
    return undefined, defined, findings


def gather(entries: Sequence[tuple[str, str, bytes]]) -> dict[str, Any]:
    """The facts of one build from ``entries``: (file name, "obj" | "cuda" | "cxx", bytes)."""
    facts: dict[str, Any] = {"kernels": [], "imports": {}, "host_asm": [], "exec_data": [], "notes": [],
                             "demangled": {}, "foreign_kernels": []}
    undefined: dict[str, set[str]] = {}
    defined: set[str] = set()
    listed: set[str] = set()
    try:
        for name, kind, data in entries:
            if kind == "obj":
                undefined[name], own, found = object_symbols(name, data)
                defined |= own
                facts["exec_data"] += found
                listed |= set(list_image(name, data).kernels)
            else:
                tu = scan(data.decode("utf-8", "replace"), device_code=kind == "cuda")
                if kind == "cuda":
                    facts["kernels"] += tu.kernels
                facts["host_asm"] += tu.host_asm
                facts["notes"] += [f"{name}: {note}" for note in tu.notes]
    except (ElfError, ValueError) as exc:
        return {**facts, "error": f"unreadable build output: {exc}"[:300]}
    facts["kernels"] = sorted(set(facts["kernels"]))
    facts["imports"] = {obj: sorted(names - defined) for obj, names in undefined.items()}
    # objects nvcc compiled (their preprocessed unit is CUDA): nvcc's host stub of every non-inline
    # __device__ function calls exit(), so that import there is the compiler's, not the candidate's
    cuda_units = {name for name, kind, _ in entries if kind == "cuda"}
    facts["nvcc_objects"] = sorted(obj for obj in undefined if obj.rsplit(".", 1)[0] + ".ii" in cuda_units)
    if sum(len(v) for v in facts["imports"].values()) > MAX_IMPORTS:
        return {**facts, "imports": {}, "error": f"more than {MAX_IMPORTS:,} imported symbols"}
    # demangled here, in the confined child: the names are the candidate's, the demangler a C library
    facts["demangled"] = demangle_many(n for names in facts["imports"].values() for n in names)
    facts["foreign_kernels"] = foreign_kernels(facts["kernels"], sorted(listed))
    return facts


def reasons(facts: dict[str, Any], policy: Policy) -> list[str]:
    """Why ``policy`` rejects a build with these facts; empty when it does not. Names only are
    matched here (the child demangled them), so the parent runs no parser on the build's output."""
    if facts.get("error"):
        return [f"the build's own objects could not be checked ({facts['error']})"]
    found = []
    if facts.get("notes"):
        found.append("the preprocessed sources could not be followed (" + "; ".join(facts["notes"][:3]) + ")")
    if facts.get("host_asm"):
        found.append("inline assembly in host code at " + ", ".join(facts["host_asm"][:NAMES_IN_MESSAGE])
                     + " (inline PTX belongs in __device__ or __global__ functions only)")
    if facts.get("exec_data"):
        found.append("; ".join(facts["exec_data"][:3]))
    imports: dict[str, list[str]] = facts.get("imports") or {}
    raw = facts.get("demangled")
    demangled: dict[str, str] = raw if isinstance(raw, dict) else {}
    found += import_problems(imports, demangled, policy, nvcc_objects=frozenset(facts.get("nvcc_objects") or ()))
    if policy == STRICT:
        foreign = [str(k) for k in facts.get("foreign_kernels") or ()]
        if foreign:
            found.append("your extension holds kernels your source does not define (compiled in from library "
                         "or PyTorch headers): " + "; ".join(foreign[:NAMES_IN_MESSAGE]))
    return found


def foreign_kernels(own: Iterable[str], listed: Iterable[str]) -> list[str]:
    """Qualified names of the listed kernels no ``__global__`` of the candidate's text defines."""
    mine = set(own)
    names = list(dict.fromkeys(listed))
    spelled = demangle_many(names)
    qualified = {N.qualified_name(spelled.get(n, n)) for n in names}
    return sorted(q for q in qualified if q not in mine)
