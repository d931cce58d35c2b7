"""Name tables behind the static checks: what PyTorch use stays allowed in a candidate, what counts
as compute. Plain data, no logic, so a reviewer can read the policy in one place."""

from __future__ import annotations

# torch.<name>(...) calls that allocate, describe or configure rather than compute the module's work.
ALLOWED_TORCH_CALLS = frozenset({
    # allocation
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "arange", "linspace", "tensor", "as_tensor", "from_numpy", "randn", "rand",
    "randint", "randn_like", "rand_like", "randint_like", "randperm", "normal",
    # views and shape helpers
    "reshape", "flatten", "squeeze", "unsqueeze", "permute", "transpose", "t", "narrow", "select",
    "split", "chunk", "unbind", "movedim", "broadcast_to", "as_strided", "view_as_real",
    "view_as_complex", "broadcast_shapes", "numel", "is_tensor", "is_floating_point", "is_complex",
    # configuration and types
    "device", "Size", "Generator", "manual_seed", "seed", "initial_seed", "no_grad", "enable_grad",
    "inference_mode", "set_grad_enabled", "is_grad_enabled", "get_default_dtype", "finfo", "iinfo",
    "promote_types", "result_type", "dtype", "get_device",
})

# torch.cuda.<name> that create or switch to another stream (rule extra-stream).
TORCH_STREAM_NAMES = frozenset({"Stream", "stream", "ExternalStream", "set_stream", "StreamContext"})

# Namespaces under torch.* whose calls are allowed wholesale.
ALLOWED_TORCH_PREFIXES = ("torch.utils.cpp_extension.", "torch.nn.init.", "torch.backends.cuda.is_built",
                          "torch.version.", "torch.testing.")

# torch.nn.<name>(...) that hold parameters or modules and compute nothing.
NN_CONTAINERS = frozenset({
    "Parameter", "ParameterList", "ParameterDict", "ModuleList", "ModuleDict", "Sequential", "Module",
    "Buffer", "UninitializedParameter", "UninitializedBuffer",
})

# Tensor methods that only reshape, move, allocate or describe (never flagged).
TENSOR_VIEW_METHODS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "contiguous", "permute", "transpose", "t", "unsqueeze",
    "squeeze", "flatten", "unflatten", "expand", "expand_as", "narrow", "select", "movedim", "split",
    "chunk", "unbind", "to", "cuda", "cpu", "float", "half", "double", "bfloat16", "int", "long",
    "bool", "type", "type_as", "clone", "detach", "detach_", "requires_grad_", "new_empty",
    "new_zeros", "new_ones", "new_full", "new_tensor", "zero_", "fill_", "copy_", "normal_",
    "uniform_", "as_strided", "pin_memory", "share_memory_", "resize_", "data_ptr", "size", "stride",
    "numel", "dim", "element_size", "nelement", "item", "tolist", "is_contiguous", "get_device",
    "storage_offset", "register_buffer", "register_parameter",
})

# Tensor attributes that are themselves tensors (x.T is a tensor, x.shape is not).
TENSOR_ATTRIBUTES = frozenset({"T", "mT", "H", "mH", "data", "real", "imag"})

# Tensor methods that compute: flagged on any receiver except the extension module.
TENSOR_COMPUTE_METHODS = frozenset({
    "matmul", "mm", "bmm", "mv", "dot", "vdot", "inner", "outer", "addmm", "addbmm", "baddbmm",
    "addmv", "addr", "einsum", "conv1d", "conv2d", "conv3d", "sum", "nansum", "mean", "nanmean",
    "prod", "cumsum", "cumprod", "logsumexp", "var", "std", "norm", "softmax", "log_softmax", "exp",
    "exp_", "expm1", "log", "log_", "log1p", "log2", "log10", "relu", "relu_", "sigmoid", "sigmoid_",
    "tanh", "tanh_", "gelu", "silu", "erf", "erfc", "sqrt", "sqrt_", "rsqrt", "rsqrt_", "reciprocal",
    "sin", "cos", "tan", "sinh", "cosh", "atan", "asin", "acos", "clamp", "clamp_", "clip", "clip_",
    "clamp_min", "clamp_max", "argmax", "argmin", "amax", "amin", "topk", "cummax", "cummin",
    "masked_fill", "masked_fill_", "where", "lerp", "addcmul", "addcdiv", "hardtanh", "leaky_relu",
    "elu", "softplus", "mish", "triu", "tril", "diag", "trace", "kron", "tensordot", "cross",
    "scatter_add", "index_add", "gather", "scatter", "flip", "roll", "repeat", "repeat_interleave",
    "tile", "cat", "stack", "neg", "negative", "square", "fmod", "remainder", "floor", "ceil",
    "trunc", "sign", "maximum", "minimum", "all", "any", "count_nonzero", "nonzero", "unique",
    "median", "mode", "histc", "bincount", "cdist", "logical_and", "logical_or", "logical_not",
    "bitwise_and", "bitwise_or", "eq", "ne", "lt", "le", "gt", "ge",
})

# Compute methods whose names also belong to Python builtins (set.add, list.sort, ...): flagged only
# when the receiver is known to be a tensor.
AMBIGUOUS_COMPUTE_METHODS = frozenset({
    "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "pow", "pow_", "abs", "abs_",
    "max", "min", "sort", "round", "true_divide", "floor_divide",
})

# Modules whose import alone signals threads or processes (rule threads-processes).
CONCURRENCY_MODULES = frozenset({
    "threading", "_thread", "multiprocessing", "concurrent", "subprocess", "asyncio", "signal",
    "torch.multiprocessing", "pty", "sched",
})
OS_PROCESS_CALLS = frozenset({
    "fork", "forkpty", "system", "popen", "spawnl", "spawnle", "spawnlp", "spawnv", "spawnve",
    "spawnvp", "execv", "execve", "execvp", "execl", "execlp", "kill", "posix_spawn", "_exit",
})

# Modules that reach into the interpreter, the evaluator or other code (rule introspection/patching).
INTROSPECTION_MODULES = frozenset({"gc", "inspect", "traceback", "tracemalloc", "weakref"})
PATCHING_MODULES = frozenset({"builtins", "unittest", "mock", "importlib", "atexit"})
HIDDEN_CODE_MODULES = frozenset({"ctypes", "cffi", "marshal", "pickle", "dill", "cloudpickle",
                                 "base64", "zlib", "codecs", "cupy", "triton", "numba", "pycuda",
                                 "jax", "tensorflow"})
HIDDEN_CODE_BUILTINS = frozenset({"exec", "eval", "compile", "__import__", "open"})
INTROSPECTION_BUILTINS = frozenset({"globals", "vars", "locals"})
MUTATING_BUILTINS = frozenset({"setattr", "delattr"})

# Dunder hooks that intercept every torch operator, the reference's included.
TORCH_INTERCEPT_NAMES = frozenset({"__torch_function__", "__torch_dispatch__", "TorchFunctionMode",
                                   "TorchDispatchMode"})

# C++ torch::/at:: names allowed in the CUDA/C++ sources (allocation, types, guards, streams).
ALLOWED_CPP_TORCH_CALLS = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "arange", "from_blob", "tensor", "Tensor", "TensorOptions", "Scalar", "Device",
    "dtype", "device", "requires_grad", "layout", "IntArrayRef", "ArrayRef", "Half", "BFloat16",
    "randn", "rand", "randint", "elementSize", "NoGradGuard", "InferenceMode", "AutoGradMode",
    "MemoryFormat", "toString", "scalarTypeToTypeMeta", "typeMetaToScalarType", "isFloatingType",
    "getCurrentCUDAStream", "getDefaultCUDAStream", "CUDAGuard", "OptionalCUDAGuard",
    "CUDAStreamGuard", "getCurrentDeviceProperties", "getDeviceProperties", "current_device",
    "device_count", "warp_size", "Slice", "TensorIndex", "PackedTensorAccessor32",
    "PackedTensorAccessor64", "TensorAccessor", "check_size_nonnegative", "nullopt", "optional",
    "make_optional", "irange", "ceil_div", "ATenCeilDiv",
})

# C++ tensor methods that compute (e.g. `a.matmul(b)` inside the host wrapper).
CPP_TENSOR_COMPUTE_METHODS = frozenset({
    "matmul", "mm", "bmm", "addmm", "baddbmm", "conv2d", "sum", "mean", "softmax", "log_softmax",
    "exp", "log", "relu", "sigmoid", "tanh", "gelu", "sqrt", "rsqrt", "clamp", "clamp_min",
    "clamp_max", "norm", "var", "std", "prod", "cumsum", "amax", "amin", "argmax", "argmin", "pow",
    "mul", "mul_", "add", "add_", "sub", "sub_", "div", "div_", "addcmul", "masked_fill", "where",
    "logsumexp", "topk", "sort", "einsum",
})

# Library calls that do the work without a kernel of the candidate's own (rule library-call).
LIBRARY_PATTERNS = (
    (r"\bcublas\w*", "cuBLAS"),
    (r"\bcudnn\w*", "cuDNN"),
    (r"\bcufft\w*", "cuFFT"),
    (r"\bcusparse\w*", "cuSPARSE"),
    (r"\bcusolver\w*", "cuSOLVER"),
    (r"\bcub::Device\w+", "CUB device-wide algorithms"),
    (r"\bthrust::\w+", "Thrust"),
)

# CUDA/C++ constructs that create or use a stream other than PyTorch's current one.
CUDA_STREAM_PATTERNS = (
    r"\bcudaStreamCreate\w*",
    r"\bgetStreamFromPool\b",
    r"\bcudaStreamNonBlocking\b",
    r"\bcudaStreamPerThread\b",
    r"\bcuStreamCreate\w*",
    r"--default-stream\b",
    r"\bCUDA_API_PER_THREAD_DEFAULT_STREAM\b",
)

# Host-side threads or processes in C++.
CPP_CONCURRENCY_PATTERNS = (
    r"\bstd::thread\b",
    r"\bstd::async\b",
    r"\bstd::jthread\b",
    r"\bpthread_create\b",
    r"#\s*include\s*<thread>",
    r"#\s*include\s*<future>",
    r"\bfork\s*\(",
    r"\bcudaLaunchHostFunc\b",
    r"\bcudaStreamAddCallback\b",
)

# Python modules that read or control the profiler: a candidate that knows when it is profiled can
# run its own kernel then and PyTorch otherwise (rule introspection).
PROFILER_MODULES = ("torch.profiler", "torch.autograd.profiler", "torch.autograd.profiler_util",
                    "torch.autograd.profiler_legacy", "torch.cuda.profiler", "torch._C._autograd",
                    "torch._C._profiler")

# The same from C++/CUDA: the profiler's state, its callbacks, CUPTI, profiler start/stop.
CPP_PROFILER_PATTERNS = (
    r"\bprofiler\b",
    r"\bkineto\b",
    r"\bcupti\w*",
    r"\bCUpti\w*",
    r"\bRecordFunction\w*",
    r"\bisRecordFunctionEnabled\b",
    r"\bcu(?:da)?Profiler(?:Start|Stop|Initialize)\b",
)

# C++ ways to patch, time or escape (patching rule).
CPP_PATCHING_PATTERNS = (
    r"\bdlsym\b",
    r"\bdlopen\b",
    r"\bsystem\s*\(",
    r"\bpopen\s*\(",
)
