"""The arguments of one ``load_inline`` call, normalised the same way wherever they come from.

Static extraction (``sources.py``), the child-process recorder and the GPU worker's hook all turn
a call into an ``ExtensionSpec`` through ``spec_from_call`` so they key the build cache alike.
Standard library only.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

# Parameter order of load_inline in torch 2.4 ... 2.14 (sycl_sources arrived in 2.7, after
# cuda_sources). Positional calls past the third argument are resolved with torch's own signature
# when torch is importable, else with the newest order below.
_NEW_ORDER = (
    "name", "cpp_sources", "cuda_sources", "sycl_sources", "functions", "extra_cflags",
    "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags", "extra_include_paths",
)
SPEC_FIELDS = (
    "name", "cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags",
    "extra_ldflags", "extra_include_paths",
)


@dataclass(frozen=True)
class ExtensionSpec:
    """The arguments of one load_inline call that decide what gets built."""

    name: str
    cpp_sources: tuple[str, ...]
    cuda_sources: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()
    extra_cflags: tuple[str, ...] = ()
    extra_cuda_cflags: tuple[str, ...] = ()
    extra_ldflags: tuple[str, ...] = ()
    extra_include_paths: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ExtensionSpec:
        return spec_from_kwargs(raw)


def load_inline_parameter_order() -> tuple[str, ...]:
    """Positional parameter names of the installed torch's load_inline (newest order if absent)."""
    try:
        import inspect

        from torch.utils import cpp_extension

        return tuple(inspect.signature(cpp_extension.load_inline).parameters)
    except Exception:  # torch missing or signature unreadable
        return _NEW_ORDER


def _strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Mapping):  # functions={name: docstring}
        return tuple(str(k) for k in value)
    return tuple(str(v) for v in value)


def spec_from_kwargs(values: Mapping[str, Any]) -> ExtensionSpec:
    """Build a spec from load_inline keyword values (extra keys are ignored)."""
    if "name" not in values:
        raise ValueError("load_inline call without a name")
    return ExtensionSpec(
        name=str(values["name"]),
        **{k: _strings(values.get(k)) for k in SPEC_FIELDS if k != "name"},
    )


def spec_from_call(
    args: Sequence[Any], kwargs: Mapping[str, Any], order: Sequence[str] | None = None
) -> ExtensionSpec:
    """Normalise a load_inline call's positional and keyword arguments into a spec."""
    names = tuple(order) if order is not None else load_inline_parameter_order()
    values = dict(zip(names, args))
    values.update(kwargs)
    return spec_from_kwargs(values)


def is_load_inline_call(call: ast.Call) -> bool:
    """``load_inline(...)`` or ``<anything>.load_inline(...)`` (the name Kevin's format uses)."""
    func = call.func
    return (isinstance(func, ast.Name) and func.id == "load_inline") or (
        isinstance(func, ast.Attribute) and func.attr == "load_inline"
    )
