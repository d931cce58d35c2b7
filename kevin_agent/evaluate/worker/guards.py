"""Defences the GPU worker raises around candidate code (KEVIN.md's reward hacks).

- ``capture_references`` / ``find_patched``: the timing, sync, comparison and profiling functions
  captured at worker start must still be the same objects after the candidate module has run, with
  the same code (``__code__``, defaults, closure cells: a function rewritten in place keeps its
  identity), the constants of the worker's own modules (tolerances, thresholds) the same values,
  and the global numerics settings (TF32, reduced-precision reductions, cuDNN flags) too.
- ``snapshot`` / ``changed_inputs``: the candidate runs on clones checked bit-identical afterwards.
- ``poison_free_memory``: every free block of torch's caching allocator is filled with 0xFF bytes
  (NaN in every float dtype) so an output the candidate never wrote cannot inherit old results.
"""

from __future__ import annotations

import copy
import re
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

POISON_BYTE = 0xFF  # all-ones: NaN for fp16/bf16/fp32/fp64, -1 for signed integers
SMALL_POOL_MAX_BYTES = 1 << 20  # torch's caching allocator serves requests <= 1 MiB from its small pool

# Named torch / time objects the worker relies on. Each path is resolved from its root module.
WATCHED_PATHS: tuple[str, ...] = (
    "torch.cuda.Event",
    "torch.cuda.Event.record",
    "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize",
    "torch.cuda.Event.query",
    "torch.cuda.Event.wait",
    "torch.cuda.Stream",
    "torch.cuda.Stream.synchronize",
    "torch.cuda.Stream.wait_stream",
    "torch.cuda.synchronize",
    "torch.cuda.current_stream",
    "torch.cuda.default_stream",
    "torch.cuda.stream",
    "torch.cuda.set_stream",
    "torch.cuda.current_device",
    "torch.cuda.manual_seed",
    "torch.cuda.memory_snapshot",
    "torch.cuda.empty_cache",
    "torch.cuda._sleep",
    "torch._C._cuda_synchronize",
    "torch._C._cuda_getCurrentStream",
    "torch.manual_seed",
    "torch.allclose",
    "torch.isclose",
    "torch.equal",
    "torch.isnan",
    "torch.isinf",
    "torch.isfinite",
    "torch.abs",
    "torch.where",
    "torch.empty",
    "torch.empty_like",
    "torch.zeros",
    "torch.no_grad",
    "torch.compile",
    "torch.nn.Module.__call__",
    "torch.nn.Module._call_impl",
    "torch.nn.Module.cuda",
    "torch.nn.Module.to",
    "torch.profiler.profile",
    "torch.profiler.record_function",
    "torch.profiler.ProfilerActivity",
    "torch.autograd.profiler.profile",
    "torch.autograd.profiler.record_function",
    "time.perf_counter",
    "time.perf_counter_ns",
    "time.time",
    "time.monotonic",
    "time.sleep",
)

# Classes whose whole attribute dict is watched (methods a candidate could swap).
WATCHED_CLASSES: tuple[str, ...] = (
    "torch.Tensor",
    "torch._C.TensorBase",
    "torch.cuda.Event",
    "torch._C._CudaEventBase",
    "torch.cuda.Stream",
    "torch.profiler.profile",
    "torch.autograd.profiler.record_function",
)

# Global numerics and backend settings: a candidate that flips one (TF32 in C++ through
# at::globalContext(), say) changes how the reference computes too. Values, compared by equality.
WATCHED_SETTINGS: tuple[str, ...] = (
    "torch.backends.cuda.matmul.allow_tf32",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
    "torch.backends.cudnn.allow_tf32",
    "torch.backends.cudnn.enabled",
    "torch.backends.cudnn.benchmark",
    "torch.backends.cudnn.deterministic",
    "torch.get_float32_matmul_precision()",
    "torch.are_deterministic_algorithms_enabled()",
    "torch.get_default_dtype()",
)

# The worker's own modules: a candidate must not swap their functions either.
OWN_MODULES: tuple[str, ...] = (
    "kevin_agent.evaluate.worker.guards",
    "kevin_agent.evaluate.worker.correctness",
    "kevin_agent.evaluate.worker.timing",
    "kevin_agent.evaluate.worker.speed_of_light",
    "kevin_agent.evaluate.worker.main",
    "kevin_agent.evaluate.worker.stages",
    "kevin_agent.evaluate.worker.context",
    "kevin_agent.evaluate.worker.baseline",
    "kevin_agent.evaluate.worker.loader",
    "kevin_agent.evaluate.worker.provenance",
    "kevin_agent.evaluate.provenance.policy",
    "kevin_agent.evaluate.provenance.attribution",
    "kevin_agent.evaluate.provenance.trace",
    "kevin_agent.evaluate.provenance.profile",
    "kevin_agent.evaluate.provenance.names",
    "kevin_agent.evaluate.provenance.symbols",
    "kevin_agent.evaluate.api",
    "kevin_agent.eval_modes",
    "kevin_agent.feedback",
    "kevin_agent.data",
    "kevin_agent.verdict_records",
)


def resolve(path: str) -> Any:
    """``"torch.cuda.Event.record"`` -> the object, importing the root module if needed."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        module = sys.modules.get(module_name)
        if module is not None:
            obj: Any = module
            for name in parts[cut:]:
                obj = _static_attr(obj, name)
            return obj
    __import__(parts[0])
    return resolve(path)


def _static_attr(obj: Any, name: str) -> Any:
    """Attribute lookup that sees a class's own dict entry (no descriptor binding surprises)."""
    if isinstance(obj, type):
        for klass in obj.__mro__:
            if name in vars(klass):
                return vars(klass)[name]
    return getattr(obj, name)


_MISSING = object()


@dataclass(frozen=True)
class CapturedReferences:
    """Objects captured at worker start: ``path -> object``. Timing calls go through these.
    ``settings``: the values of ``WATCHED_SETTINGS`` at that time."""

    objects: Mapping[str, Any]
    settings: Mapping[str, Any] = field(default_factory=dict)
    code: Mapping[str, Any] = field(default_factory=dict)  # path -> ``code_state`` of a Python function
    state: Mapping[str, Any] = field(default_factory=dict)  # "module.NAME" -> a copy of a module constant

    def get(self, path: str) -> Any:
        return self.objects[path]


def read_setting(path: str) -> Any:
    """The current value of one ``WATCHED_SETTINGS`` entry (``_MISSING`` when unreadable)."""
    import warnings

    call = path.endswith("()")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # some getters are deprecated in newer torch
            value = resolve(path[:-2] if call else path)
            return value() if call else value
    except Exception:
        return _MISSING


def capture_settings(paths: Iterable[str] = WATCHED_SETTINGS) -> dict[str, Any]:
    return {path: read_setting(path) for path in paths}


# Modules whose first import rebinds watched torch functions: ``torch._dynamo`` wraps
# ``torch.manual_seed`` in ``_disable_dynamo``, and it is imported lazily by torch itself (the
# profiler's ``prepare_trace`` reads ``torch._inductor``, which imports dynamo). Imported before
# capturing, so a later lazy import is not taken for a candidate's patch.
SETTLING_IMPORTS: tuple[str, ...] = ("torch._dynamo",)


def settle_imports(modules: Iterable[str] = SETTLING_IMPORTS) -> None:
    """Import the modules whose import rebinds watched functions (idempotent)."""
    import importlib

    for name in modules:
        if name not in sys.modules:
            importlib.import_module(name)


def capture_references(
    paths: Iterable[str] = WATCHED_PATHS,
    classes: Iterable[str] = WATCHED_CLASSES,
    own_modules: Iterable[str] = OWN_MODULES,
) -> CapturedReferences:
    """Capture watched objects; call before any candidate code runs (torch's self-patching imports
    are settled first)."""
    settle_imports()
    objects: dict[str, Any] = {}
    for path in paths:
        try:
            objects[path] = resolve(path)
        except (AttributeError, ImportError):
            objects[path] = _MISSING  # absent in this torch version: must stay absent
    for class_path in classes:
        try:
            klass = resolve(class_path)
        except (AttributeError, ImportError):
            continue
        for name in _class_names(klass):
            objects[f"{class_path}.{name}"] = _static_attr(klass, name)
    for module_name in own_modules:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name, value in list(vars(module).items()):
            if callable(value) and not isinstance(value, types.ModuleType) and not name.startswith("__"):
                objects[f"{module_name}.{name}"] = value
    code = {path: code_state(obj) for path, obj in objects.items() if code_state(obj) is not None}
    return CapturedReferences(objects, capture_settings(), code, capture_module_state(own_modules))


_FUNCTION_PARTS = ("__code__", "__defaults__", "__kwdefaults__")


def code_state(obj: Any) -> Any:
    """What a Python function runs, beyond its identity: its code object, defaults and closure
    cells (their current contents), for a function or one held by a method, static/class method
    or property; None for builtins and other objects (their behaviour is not Python-rewritable)."""
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        return tuple(code_state(f) for f in (obj.fget, obj.fset, obj.fdel))
    obj = getattr(obj, "__func__", obj)  # bound methods
    if not isinstance(obj, types.FunctionType):
        return None
    cells = tuple(_cell_contents(c) for c in obj.__closure__ or ())
    return tuple(getattr(obj, part) for part in _FUNCTION_PARTS) + (cells,)


def _cell_contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _MISSING


_CONSTANT_TYPES = (int, float, str, bytes, bool, type(None), tuple, frozenset, list, dict, set, re.Pattern)


def capture_module_state(module_names: Iterable[str]) -> dict[str, Any]:
    """Copies of the constants of the worker's own modules (tolerances, thresholds, rule tables):
    a candidate that changes ``FP64_RMS_MULTIPLIER`` or a policy table changes the judge."""
    state: dict[str, Any] = {}
    for module_name in module_names:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name, value in list(vars(module).items()):
            if name.startswith("__") or not isinstance(value, _CONSTANT_TYPES):
                continue
            try:
                state[f"{module_name}.{name}"] = copy.deepcopy(value)
            except Exception:  # an uncopyable value is not a constant of ours
                continue
    return state


def with_module_state(captured: CapturedReferences, module_names: Iterable[str] = OWN_MODULES) -> CapturedReferences:
    """``captured`` with its module constants taken again (after the worker's own set-up changed
    one, e.g. the profiler warm-up's outcome), still before any candidate code runs."""
    import dataclasses

    return dataclasses.replace(captured, state=capture_module_state(module_names))


def _changed_state(captured: CapturedReferences) -> list[str]:
    """Paths whose function code or module constant differs from the captured one."""
    changed = []
    for path, before in captured.code.items():
        try:
            now = code_state(_resolve_for_check(path))
        except (AttributeError, ImportError, KeyError):
            now = _MISSING
        if not _same(now, before):
            changed.append(path)
    for path, before in captured.state.items():
        module_name, _, name = path.rpartition(".")
        module = sys.modules.get(module_name)
        now = vars(module).get(name, _MISSING) if module is not None else _MISSING
        if not _same(now, before):
            changed.append(path)
    return changed


def _same(now: Any, before: Any) -> bool:
    if now is before:
        return True
    try:
        return type(now) is type(before) and bool(now == before)
    except Exception:
        return False


def _class_names(klass: type) -> set[str]:
    """Attribute names of a class and its bases (object excluded), dunders only when watched."""
    names: set[str] = set()
    for base in klass.__mro__:
        if base is object:
            continue
        for name in vars(base):
            if not (name.startswith("__") and name.endswith("__")) or name in _WATCHED_DUNDERS:
                names.add(name)
    return names


_WATCHED_DUNDERS = frozenset(
    {"__call__", "__sub__", "__rsub__", "__add__", "__mul__", "__truediv__", "__le__", "__lt__",
     "__ge__", "__gt__", "__eq__", "__ne__", "__abs__", "__and__", "__or__", "__invert__",
     "__getitem__", "__setitem__", "__init__", "__new__", "__enter__", "__exit__"}
)


def find_patched(captured: CapturedReferences) -> list[str]:
    """Paths whose object is no longer the captured one (sorted); ``[]`` when nothing changed."""
    patched = []
    for path, original in captured.objects.items():
        try:
            current = _resolve_for_check(path)
        except (AttributeError, ImportError, KeyError):
            current = _MISSING
        if current is not original:
            patched.append(path)
    for path, original in captured.settings.items():
        current = read_setting(path)
        if current is not original and current != original:
            patched.append(path)
    patched += [path for path in _changed_state(captured) if path not in patched]
    return sorted(patched)


def _resolve_for_check(path: str) -> Any:
    """Like ``resolve``; class attributes through the MRO, so a shadowing subclass entry shows."""
    head, _, name = path.rpartition(".")
    if head:
        try:
            owner = resolve(head)
        except (AttributeError, ImportError):
            return _MISSING
        if isinstance(owner, type):
            try:
                return _static_attr(owner, name)
            except AttributeError:
                return _MISSING
        if isinstance(owner, types.ModuleType):
            return vars(owner).get(name, _MISSING)
        return getattr(owner, name, _MISSING)
    return resolve(path)


def patched_message(paths: list[str], limit: int = 8) -> str:
    """One sentence for the model naming what was replaced."""
    shown = ", ".join(paths[:limit])
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return (
        f"Your code replaced functions or changed global settings the evaluator uses for timing or "
        f"checking ({shown}{more}). Patching torch, timing or evaluator functions, or changing torch's "
        "global numerics settings, is not allowed."
    )


# ---------------------------------------------------------------- input snapshots


def snapshot(value: Any) -> Any:
    """A deep, detached copy of inputs (tensors cloned on their device)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(snapshot(v) for v in value)
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    return copy.deepcopy(value)


def changed_inputs(before: Any, after: Any, prefix: str = "input") -> list[str]:
    """Names of inputs that differ bit-for-bit (or in shape, stride, dtype) after a run."""
    import torch

    if isinstance(before, torch.Tensor):
        if not isinstance(after, torch.Tensor):
            return [prefix]
        same_meta = (
            before.shape == after.shape and before.dtype == after.dtype and before.device == after.device
        )
        return [] if same_meta and bit_identical(before, after) else [prefix]
    if isinstance(before, (list, tuple)):
        if not isinstance(after, (list, tuple)) or len(before) != len(after):
            return [prefix]
        changed: list[str] = []
        for index, (b, a) in enumerate(zip(before, after)):
            changed += changed_inputs(b, a, f"{prefix}[{index}]" if prefix != "input" else f"input {index}")
        return changed
    if isinstance(before, dict):
        if not isinstance(after, dict) or before.keys() != after.keys():
            return [prefix]
        changed = []
        for key in before:
            changed += changed_inputs(before[key], after[key], f"{prefix}[{key!r}]")
        return changed
    try:
        return [] if before == after else [prefix]
    except Exception:
        return [prefix]


def bit_identical(a: Any, b: Any) -> bool:
    """Same bytes (NaN-safe): compares the raw storage of contiguous copies."""
    import torch

    if a.numel() == 0:
        return b.numel() == 0
    a_bytes = a.detach().contiguous().reshape(-1).view(torch.uint8)
    b_bytes = b.detach().contiguous().reshape(-1).view(torch.uint8)
    return bool(torch.equal(a_bytes, b_bytes))


# ---------------------------------------------------------------- memory poisoning


def poison_plan(snapshot_segments: list[dict[str, Any]]) -> list[int]:
    """Request sizes (bytes) that together take every free block of the caching allocator.

    Largest first, so best-fit hands back exactly those blocks. Free blocks of the small pool are
    requested in pieces of at most 1 MiB (larger requests would go to the large pool instead).
    """
    large: list[int] = []
    small: list[int] = []
    for segment in snapshot_segments:
        is_small = segment.get("segment_type") == "small"
        for block in segment.get("blocks", []):
            if block.get("state") != "inactive":
                continue
            size = int(block.get("size", 0))
            if size <= 0:
                continue
            if is_small:
                while size > 0:
                    piece = min(size, SMALL_POOL_MAX_BYTES)
                    small.append(piece)
                    size -= piece
            else:
                large.append(size)
    return sorted(large, reverse=True) + sorted(small, reverse=True)


def poison_free_memory(device: Any = None, synchronize: Callable[[], None] | None = None) -> int:
    """Fill every free cached block with 0xFF bytes, then release them back to the cache.

    Returns the number of bytes poisoned. The worker never empties the cache, so memory a model
    freed stays in these blocks, and new allocations come from them.
    """
    import torch

    sync = synchronize or torch.cuda.synchronize
    sync()
    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    segments = [seg for seg in torch.cuda.memory_snapshot() if seg.get("device", index) == index]
    held = []
    for size in poison_plan(segments):
        block = torch.empty(size, dtype=torch.uint8, device=device)
        block.fill_(POISON_BYTE)
        held.append(block)
    sync()
    poisoned = sum(block.numel() for block in held)
    del held
    return poisoned
