"""Attribute every profiled GPU activity to own / library / torch / generated / other.

Order of decision for one activity (first that applies):

1. **memcpy / memset** operations are never own (they are not kernels compiled from the
   candidate's sources): origin ``torch`` when launched inside a PyTorch op (``aten::copy_``,
   ``aten::zero_``), else ``other`` (e.g. ``cudaMemcpyAsync`` called from the candidate's C++);
   role ``copy`` / ``fill``.
2. **Own**: the name is one of the kernels built into the candidate's extension(s):
   the exact demangled name, the mangled name (when the profiler could not demangle it), or, as a
   fallback, the *qualified name* (namespaces + name, no template arguments or parameters) when
   that is unambiguous: it belongs to the candidate's kernels and no foreign family table claims it.
   An own-named kernel launched inside a PyTorch op (``aten::...``) or a torch.compile region is not
   own: the candidate's name collides with a foreign kernel's, and the launch context wins.
   Own kernels from library namespaces (``cub::``, ``thrust::``, ``cutlass::``, ``cute::``) are
   ``library``: device-wide algorithms compiled into the extension, not written by the candidate;
   ATen kernel templates instantiated in the extension (``at::native::...``) are ``torch``.
   With the candidate's sources known (``OwnKernels.from_sources``), a listed kernel that no
   ``__global__`` in them defines is not own either: template code of a header instantiated in
   the extension (``library``, or ``torch`` for ATen's), whatever its name.
3. **Name tables** (``names.FAMILIES``): Triton/nvFuser -> generated; ATen -> torch; cuBLAS,
   cuDNN, CUTLASS, cuFFT, NCCL... -> library.
4. **Launch context** for names no table knows: inside a torch.compile region -> generated; inside
   ``aten::mm``/``aten::conv2d``-like ops -> the library they call; inside any other ``aten::`` op ->
   torch.
5. Otherwise ``other``.

Foreign activities also get a role (``names.role_of``): ``fill``, ``copy`` or ``compute``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from kevin_agent.evaluate.provenance import names as N
from kevin_agent.evaluate.provenance.demangle import demangle_many
from kevin_agent.evaluate.provenance.symbols import ExtensionKernels
from kevin_agent.evaluate.provenance.trace import KernelActivity


class OwnKernels:
    """The kernels compiled from the candidate's sources, in every spelling the profiler may use."""

    def __init__(self, names: Iterable[str] = (), demangled: Mapping[str, str] | None = None) -> None:
        self.names = tuple(dict.fromkeys(n for n in names if n))
        spelled = dict(demangled) if demangled is not None else demangle_many(self.names)
        self.demangled = {k: v for k, v in spelled.items() if k in self.names}
        self.exact = set(self.names) | set(self.demangled.values())
        self.qualified: dict[str, list[str]] = {}
        for name in self.names:
            qualified = N.qualified_name(self.demangled.get(name, name))
            self.qualified.setdefault(qualified, []).append(name)

    @classmethod
    def from_extensions(cls, extensions: Iterable[ExtensionKernels | Mapping[str, Any]]) -> OwnKernels:
        names: list[str] = []
        for ext in extensions:
            kernels = ext.kernels if isinstance(ext, ExtensionKernels) else ext.get("kernels", ())
            names.extend(kernels)
        return cls(names)

    def __bool__(self) -> bool:
        return bool(self.names)

    bundled: frozenset[str] = frozenset()  # spellings of listed kernels no candidate source defines

    def from_sources(self, defined: set[str], qualified: bool = False) -> OwnKernels:
        """Only the kernels whose base name (``qualified``: whole qualified name, as the build's
        facts give them from the preprocessed sources) a ``__global__`` in the candidate's sources
        defines; the others (template kernels instantiated from PyTorch, CUB or other headers)
        become ``bundled``: compiled into the extension, not written by the candidate."""
        name_of = N.qualified_name if qualified else _base_name
        keep = [n for n in self.names if name_of(self.demangled.get(n, n)) in defined]
        own = OwnKernels(keep, {n: self.demangled[n] for n in keep if n in self.demangled})
        dropped = [n for n in self.names if n not in keep]
        own.bundled = frozenset(dropped) | frozenset(self.demangled[n] for n in dropped if n in self.demangled)
        return own

    def match(self, profiled: str) -> str | None:
        """How ``profiled`` matches an own kernel: "exact", "base" or None."""
        if profiled in self.exact:
            return "exact"
        qualified = N.qualified_name(profiled)
        if qualified in self.qualified and N.family_of(profiled) is None:
            return "base"
        return None


@dataclass
class Attribution:
    """One activity's verdict: where it came from and what it did."""

    origin: str  # own | library | torch | generated | other
    role: str  # compute | fill | copy (own kernels: compute)
    family: str  # "your extension", "cuBLAS", "PyTorch ATen", "Triton (inductor)"...
    how: str  # exact | base | name | context | memop | unknown | collision


def _base_name(name: str) -> str:
    """``void ns::k<float>(float*)`` -> ``k``."""
    return N.qualified_name(name).rsplit("::", 1)[-1]


BUNDLED_FAMILY = "header code compiled into your extension (no __global__ of that name in your sources)"


def attribute(activity: KernelActivity, own: OwnKernels) -> Attribution:
    """Origin, role and family of one activity (see the module docstring for the order)."""
    foreign_context = _foreign_context(activity.context)
    if activity.kind in ("memcpy", "memset"):
        origin = N.TORCH if foreign_context is not None else N.OTHER
        return Attribution(origin, N.role_of(activity.name, activity.kind), "CUDA runtime (memcpy/memset)", "memop")
    if activity.name in own.bundled and foreign_context is None:
        bundled = N.bundled_origin(activity.name)
        origin, family = bundled if bundled is not None else (N.LIBRARY, BUNDLED_FAMILY)
        return Attribution(origin, N.role_of(activity.name) if origin == N.TORCH else N.COMPUTE, family, "bundled")
    how = own.match(activity.name)
    if how is not None and foreign_context is None:
        bundled = N.bundled_origin(own.demangled.get(activity.name, activity.name))
        if bundled is not None:
            origin, family = bundled
            return Attribution(origin, N.role_of(activity.name) if origin == N.TORCH else N.COMPUTE, family, how)
        return Attribution(N.OWN, N.COMPUTE, "your extension", how)
    collision = how is not None
    claimed = N.family_of(activity.name)
    if claimed is not None:
        origin, family = claimed
        return Attribution(origin, N.role_of(activity.name) if origin == N.TORCH else N.COMPUTE, family,
                           "collision" if collision else "name")
    if foreign_context is not None:
        origin, family = foreign_context
        role = N.role_of(activity.name) if origin == N.TORCH else N.COMPUTE
        return Attribution(origin, role, family, "collision" if collision else "context")
    return Attribution(N.OTHER, N.COMPUTE, "unknown", "unknown")


def _foreign_context(context: Iterable[str]) -> tuple[str, str] | None:
    """(origin, family) implied by a launch inside a torch op or compiled region, else None."""
    context = tuple(context)
    if any(N.is_compiled_region(c) for c in context):
        return N.GENERATED, "torch.compile region"
    aten = [c for c in context if c.startswith("aten::")]
    if not aten:
        return None
    family = N.library_for_aten_op(aten[-1])  # the innermost op is the one that launched it
    return (N.LIBRARY, family) if family is not None else (N.TORCH, "PyTorch ATen")


def called_from(context: Iterable[str]) -> str:
    """The op the candidate's code called (``aten::conv2d``), not the innermost one that launched."""
    context = tuple(context)
    for name in context:
        if name.startswith("aten::") or N.is_compiled_region(name):
            return name
    return context[-1] if context else ""


@dataclass
class KernelRow:
    """One row of the verdict's kernel table: ``{name, origin, calls, ms, share}`` plus details."""

    name: str
    origin: str
    calls: int
    ms: float
    share: float  # of the forward call's summed device time
    role: str = N.COMPUTE
    family: str = ""
    how: str = ""
    called_from: str = ""  # the outermost torch op (or compiled region) it was launched from, if any

    @property
    def foreign(self) -> bool:
        return self.origin != N.OWN

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> KernelRow:
        fields = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
        return cls(**fields)


def kernel_rows(activities: Iterable[KernelActivity], own: OwnKernels) -> list[KernelRow]:
    """Attributed rows, one per (name, origin, role), largest device time first."""
    activities = list(activities)
    total = sum(a.ms for a in activities)
    rows: dict[tuple[str, str, str], KernelRow] = {}
    for activity in activities:
        verdict = attribute(activity, own)
        key = (activity.name, verdict.origin, verdict.role)
        row = rows.get(key)
        if row is None:
            row = rows[key] = KernelRow(activity.name, verdict.origin, 0, 0.0, 0.0, verdict.role, verdict.family,
                                        verdict.how, called_from(activity.context))
        row.calls += activity.calls
        row.ms += activity.ms
    for row in rows.values():
        row.share = row.ms / total if total > 0 else 0.0
    return sorted(rows.values(), key=lambda r: (-r.ms, -r.calls, r.name))
