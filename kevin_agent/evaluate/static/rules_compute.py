"""Static rules that catch PyTorch doing the module's work in Python: torch/torch.nn.functional calls,
calls of torch.nn layers, tensor compute methods and tensor arithmetic in forward-path code.

__init__ bodies are exempt (building parameters may use torch freely); so are get_inputs /
get_init_inputs and a main guard."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Optional

from kevin_agent.evaluate.static import tables as T
from kevin_agent.evaluate.static.context import CandidateContext
from kevin_agent.evaluate.static.rule import Violation

_OWN_KERNEL = "the computation must run in your own CUDA kernel"
_ALLOWED = ("only allocation (torch.empty...), views/reshapes, parameters and calls of your load_inline "
            "extension may use torch")
# Tensor methods that return a non-tensor (sizes, pointers, Python numbers).
_SCALAR_METHODS = frozenset({"size", "stride", "numel", "dim", "element_size", "nelement", "item", "tolist",
                             "is_contiguous", "get_device", "storage_offset", "data_ptr", "register_buffer",
                             "register_parameter"})
# torch.* namespaces with rules of their own (streams, patching) or no compute (config, cpp_extension).
_JUDGED_ELSEWHERE = frozenset({"cuda", "backends", "library", "_C", "overrides", "utils", "version",
                               "testing", "Stream", "Event", "autograd"})
# torch.<name>(...) that return a tensor (allocation and views).
_TORCH_TENSOR_FACTORIES = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "arange", "linspace", "tensor", "as_tensor", "from_numpy", "randn", "rand", "randint", "randn_like",
    "rand_like", "randint_like", "randperm", "normal", "reshape", "flatten", "squeeze", "unsqueeze",
    "permute", "transpose", "t", "narrow", "select", "movedim", "broadcast_to", "as_strided",
    "view_as_real", "view_as_complex",
})
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.MatMult)


def _torch_call_problem(path: str, region: str) -> Optional[str]:
    """Why a call of torch.<path> is PyTorch compute, or None when it is allowed."""
    if not path.startswith("torch.") or path.startswith(T.ALLOWED_TORCH_PREFIXES):
        return None
    rest = path[len("torch."):]
    head, _, tail = rest.partition(".")
    if head in _JUDGED_ELSEWHERE or head.startswith("set_") or head == "use_deterministic_algorithms":
        return None
    if head == "nn":
        sub = tail.partition(".")[0]
        if sub in {"functional", "utils"}:
            return f"calls {path}"
        if sub in T.NN_CONTAINERS or sub == "init" or not sub[:1].isupper() or region != "forward":
            return None  # containers, init, and layers built outside forward (holding weights)
        return f"builds the torch.nn layer {path} in forward"
    if head == "Tensor":
        return None if tail in T.TENSOR_VIEW_METHODS else f"calls {path}"
    if head in {"compile", "jit", "_dynamo", "_inductor", "export", "fx"}:
        return f"uses {path}, which generates the kernels for you"
    if head == "ops":
        namespace = tail.partition(".")[0]
        return f"calls the ATen operator {path}" if namespace in {"aten", "prims", "quantized"} else None
    if not tail and rest in T.ALLOWED_TORCH_CALLS:
        return None
    return f"calls {path}"


def check_torch_compute(ctx: CandidateContext) -> Iterator[Violation]:
    for node in ctx.nodes("module", "forward"):
        if not isinstance(node, ast.Call):
            continue
        path = ctx.qualname(node.func)
        problem = _torch_call_problem(path, ctx.region(node) or "") if path else None
        if problem:
            yield Violation("torch-compute", node.lineno,
                            f"ModelNew {problem}: {_OWN_KERNEL}; {_ALLOWED}.")


def _is_layer_constructor(ctx: CandidateContext, node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    path = ctx.qualname(node.func) or ""
    if not path.startswith("torch.nn."):
        return False
    name = path[len("torch.nn."):]
    return "." not in name and name[:1].isupper() and name not in T.NN_CONTAINERS


def _holds_layers(ctx: CandidateContext, value: ast.AST) -> bool:
    """A layer constructor, or a container (Sequential, ModuleList, list ...) holding one."""
    return any(_is_layer_constructor(ctx, sub) for sub in ast.walk(value))


def _key(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return f"self.{node.attr}"
    return None


def _layer_keys(ctx: CandidateContext) -> set[str]:
    keys: set[str] = set()
    for _ in range(2):
        for node in ast.walk(ctx.tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if _holds_layers(ctx, node.value) or _key(node.value) in keys:
                    keys |= {k for k in map(_key, targets) if k}
            elif isinstance(node, (ast.For, ast.comprehension)) and any(
                    _key(sub) in keys for sub in ast.walk(node.iter)):
                keys |= {k for k in map(_key, ast.walk(node.target)) if k}
    return keys


def check_layer_calls(ctx: CandidateContext) -> Iterator[Violation]:
    keys = _layer_keys(ctx)
    for node in ctx.nodes("forward"):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in {"forward", "__call__"}:
            func = func.value
        while isinstance(func, ast.Subscript):
            func = func.value
        if _key(func) in keys or _is_layer_constructor(ctx, func):
            yield Violation("nn-layer-call", node.lineno,
                            f"ModelNew.forward calls the torch.nn layer {ast.unparse(func)}: {_OWN_KERNEL}. "
                            "A layer may hold weights (pass layer.weight / layer.bias to your kernel) but must "
                            "not be called.")


class _TensorNames:
    """Which expressions of one forward-path function are tensors (flow-insensitive, conservative)."""

    def __init__(self, ctx: CandidateContext, function: ast.AST, tensor_attrs: set[str]) -> None:
        self.ctx = ctx
        self.attrs = tensor_attrs
        self.names: set[str] = set()
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and function.name == "forward":
            self.names |= {a.arg for a in function.args.args[1:] + function.args.kwonlyargs
                           if not _scalar_annotation(a.annotation)}
            for arg, default in zip(reversed(function.args.args), reversed(function.args.defaults)):
                if isinstance(default, ast.Constant) and default.value is not None:
                    self.names.discard(arg.arg)
        for _ in range(3):
            for node in ast.walk(function):
                if isinstance(node, ast.Assign) and self.is_tensor(node.value):
                    for target in node.targets:
                        self.names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}

    def is_tensor(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.names
        if isinstance(node, ast.Attribute):
            if _key(node) in self.attrs:
                return True
            if node.attr in {"weight", "bias"} and isinstance(node.value, ast.Attribute):
                return True
            return node.attr in T.TENSOR_ATTRIBUTES and self.is_tensor(node.value)
        if isinstance(node, ast.Subscript):
            return self.is_tensor(node.value)
        if isinstance(node, (ast.Tuple, ast.List)):
            return False
        if isinstance(node, ast.BinOp):
            return self.is_tensor(node.left) or self.is_tensor(node.right)
        if isinstance(node, ast.Call):
            func = node.func
            path = self.ctx.qualname(func) or ""
            if path.startswith("torch."):
                return path[len("torch."):] in _TORCH_TENSOR_FACTORIES
            if isinstance(func, ast.Attribute):
                if self.ctx.is_extension(func.value) or func.attr in self.ctx.extension_functions:
                    return True
                return (func.attr in T.TENSOR_VIEW_METHODS and func.attr not in _SCALAR_METHODS
                        and self.is_tensor(func.value))
        return False


def _scalar_annotation(annotation: Optional[ast.expr]) -> bool:
    return isinstance(annotation, ast.Name) and annotation.id in {"int", "float", "bool", "str"}


def _tensor_attributes(ctx: CandidateContext) -> set[str]:
    """self.X assigned a Parameter, a torch allocation, or registered as a buffer/parameter."""
    attrs: set[str] = set()
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            path = ctx.qualname(node.value.func) or ""
            if path in {"torch.nn.Parameter", "torch.nn.Buffer"} or (
                    path.startswith("torch.") and path[len("torch."):] in _TORCH_TENSOR_FACTORIES):
                attrs |= {k for k in map(_key, node.targets) if k and k.startswith("self.")}
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in {"register_buffer", "register_parameter"} and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            attrs.add(f"self.{node.args[0].value}")
    return attrs


def _functions(ctx: CandidateContext) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ctx.nodes("forward"):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and ctx.region(ctx.parent(node)) != "forward":
            yield node


def check_tensor_compute(ctx: CandidateContext) -> Iterator[Violation]:
    attrs = _tensor_attributes(ctx)
    for function in _functions(ctx):
        tensors = _TensorNames(ctx, function, attrs)
        for node in ast.walk(function):
            problem = _tensor_problem(ctx, tensors, node)
            if problem:
                line = node.lineno if isinstance(node, (ast.expr, ast.stmt)) else function.lineno
                yield Violation("tensor-compute", line,
                                f"ModelNew {problem}: {_OWN_KERNEL} (fuse it into your kernel); {_ALLOWED}.")


def _tensor_problem(ctx: CandidateContext, tensors: _TensorNames, node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return f"multiplies matrices with @ ({ast.unparse(node)})"
    if isinstance(node, ast.BinOp) and isinstance(node.op, _ARITHMETIC) and (
            tensors.is_tensor(node.left) or tensors.is_tensor(node.right)):
        return f"does tensor arithmetic in PyTorch ({ast.unparse(node)})"
    if isinstance(node, ast.AugAssign) and isinstance(node.op, _ARITHMETIC) and tensors.is_tensor(node.target):
        return f"does tensor arithmetic in PyTorch ({ast.unparse(node).strip()})"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and tensors.is_tensor(node.operand):
        return f"negates a tensor in PyTorch ({ast.unparse(node)})"
    if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Subscript) and tensors.is_tensor(t.value) for t in node.targets):
        return f"writes tensor elements in PyTorch ({ast.unparse(node.targets[0])} = ...)"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        method, receiver = node.func.attr, node.func.value
        if ctx.qualname(node.func) or ctx.is_extension(receiver) or method in ctx.extension_functions:
            return None  # module functions (torch.x, math.x) and the extension are judged elsewhere
        if method in T.TENSOR_COMPUTE_METHODS or (
                method in T.AMBIGUOUS_COMPUTE_METHODS and tensors.is_tensor(receiver)):
            return f"calls the tensor method .{method}() ({ast.unparse(node)})"
    return None
