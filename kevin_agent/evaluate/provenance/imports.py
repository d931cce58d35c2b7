"""What the candidate's own object files may call: the allow-list of undefined symbols.

An own object (``build.layout``: the candidate's kernels, host code and cpp_sources, none of our
code) imports exactly the functions and data its code reaches by name. Each import, demangled,
is ``allowed`` (tensor accessors and allocation, c10 errors and streams, the CUDA runtime, the C++
runtime, libm), ``compute`` (ATen operators that compute, ATen and CUDA library calls: allowed
under ``partial``, KernelBench's rule, and rejected under ``strict``), or ``denied`` under both
(the Python C API, pybind11, dynamic loading, memory mapping, raw syscalls, files, processes,
sockets, the environment, operator registration, and anything on no list). ATen operators are
classed like ``names.ROLES`` classes kernels: allocation, views, copies and fills are not compute.
Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from kevin_agent.eval_modes import STRICT, Policy
from kevin_agent.evaluate.provenance import names as N

ALLOWED, COMPUTE, DENIED = "allowed", "compute", "denied"
NAMES_IN_MESSAGE = 6

# at::_ops::<op> structs whose operators allocate, view, copy, fill or describe (never compute).
NON_COMPUTE_OPS = frozenset({
    "empty_memory_format", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "arange", "arange_start", "arange_start_step", "new_empty", "new_zeros", "new_ones", "new_full",
    "new_empty_strided", "view", "view_dtype", "view_as", "reshape", "contiguous", "permute", "transpose_int",
    "t", "unsqueeze", "squeeze", "squeeze_dim", "squeeze_dims", "flatten_using_ints", "unflatten_int", "expand",
    "expand_as", "narrow", "narrow_Tensor", "select_int", "slice_Tensor", "as_strided", "movedim_int",
    "movedim_intlist", "alias", "detach", "to_dtype", "to_dtype_layout", "to_device", "to_other", "_to_copy",
    "copy_", "clone", "fill__Scalar", "fill_Scalar", "zero_", "resize_", "item", "_local_scalar_dense",
    "split_Tensor", "chunk", "unbind_int", "empty_like_out", "set_", "is_contiguous", "size_int", "stride_int",
})
# at::cuda:: functions that query the device or pick a stream (the rest of at::cuda:: computes).
AT_CUDA_QUERIES = re.compile(r"at::cuda::(?:getCurrentCUDAStream|getDefaultCUDAStream|getStreamFromPool|"
                             r"getCurrentDeviceProperties|getDeviceProperties|warp_size|getNumGPUs|current_device|"
                             r"device_count|CUDAEvent)\b")

# (category, pattern on the demangled name); the first matching row decides.
DENIED_ROWS: tuple[tuple[str, str], ...] = (
    ("the Python C API", r"_?Py[A-Z_]|_Py"),
    ("pybind11", r"(?:.* )?pybind11::"),
    ("dynamic loading", r"(?:dlopen|dlmopen|dlsym|dlvsym|dlclose|dlerror|dladdr1?|dlinfo|dl_iterate_phdr|_dl_\w+)$"),
    ("memory mapping", r"(?:mprotect|pkey_mprotect|mmap|mmap64|munmap|mremap|madvise|memfd_create|shm_open|brk|sbrk)$"),
    ("raw system calls and process control",
     r"(?:syscall|ptrace|process_vm_readv|process_vm_writev|fork|vfork|clone3?|execv\w*|execl\w*|fexecve|system|"
     r"popen|pclose|posix_spawn\w*|kill|tgkill|tkill|raise|signal|sigaction|prctl|setrlimit|prlimit\w*|unshare|setns|"
     r"chroot|exit|_exit|_Exit|quick_exit|pthread_create|pthread_kill|pthread_cancel|std::thread|std::jthread)"),
    ("files", r"(?:open|open64|openat|openat64|creat|fopen|fopen64|freopen|fdopen|read|pread\w*|write|pwrite\w*|readv|"
              r"writev|unlink\w*|rename\w*|remove|mkdir\w*|rmdir|symlink\w*|link|linkat|chmod|fchmod\w*|chown|"
              r"truncate|ftruncate|close|dup\d?|fcntl|ioctl|stat\w*|fstat\w*|lstat\w*|access|faccessat|opendir|"
              r"readdir\w*|fread|fgets|getline|sendfile|splice|mkstemp\w*|tmpfile|tmpnam|__open\w*|__read\w*|"
              r"__xstat\w*|__fxstat\w*)$|std::(?:__cxx11::)?basic_(?:i|o)?fstream|std::basic_filebuf|std::__basic_file|"
              r"std::filesystem::"),
    ("sockets", r"(?:socket|socketpair|connect|bind|listen|accept4?|send\w*|recv\w*|getaddrinfo|gethostbyname\w*|"
                r"shutdown|setsockopt|getsockopt)$"),
    ("the environment", r"(?:getenv|secure_getenv|setenv|unsetenv|putenv|clearenv|environ|__environ)$"),
    ("operator registration (TORCH_LIBRARY)", r"(?:torch::Library|torch::detail::TorchLibraryInit|c10::Dispatcher|"
                                              r"c10::impl::OperatorEntry|c10::OperatorHandle|c10::RegisterOperators|"
                                              r"c10::KernelFunction|c10::BoxedKernel|c10::impl::\w*Kernel)"),
    ("CUDA driver entry points", r"(?:cudaGetDriverEntryPoint\w*|cuGetProcAddress\w*|cudaIpc\w*|cuIpc\w*|cuModule\w*|"
                                 r"cuLibrary\w*|nvrtc\w*|nvJitLink\w*|cudaLibrary\w*)"),
)
COMPUTE_ROWS: tuple[tuple[str, str], ...] = (
    ("ATen operators that compute", r"at::_ops::"),
    ("ATen's own kernels", r"at::native::|at::cuda::|at::"),
    ("PyTorch's C++ frontend", r"torch::"),
    ("CUDA libraries", r"(?:cublas|cudnn|cufft|cusparse|cusolver|curand|nccl|cutensor|cutlass|thrust::|cub::)"),
)
ALLOWED_ROWS: tuple[str, ...] = (
    r"at::(?:TensorBase|Tensor|TensorMaker|OptionalTensorRef)::", r"at::detail::(?:empty\w*|check_size_nonnegative|"
    r"computeStorageNbytes\w*)\b", r"at::print\b", r"c10::", r"caffe2::TypeMeta::",
    r"torch::autograd::AutogradMeta\b", r"__cxxabiv1::",
    r"cuda\w*$", r"__cuda\w*$", r"__nv\w*$",
    r"__cxa_\w+$", r"__gxx_personality_v0$", r"_Unwind_\w+$", r"__stack_chk_fail$",
    r"__dso_handle$", r"_GLOBAL_OFFSET_TABLE_$", r"__tls_get_addr$", r"__assert_fail$", r"__libc_single_threaded$",
    r"atexit$", r"__dynamic_cast$", r"abort$", r"std::", r"__gnu_cxx::",
    r"(?:mem(?:cpy|move|set|cmp|chr)|str(?:len|nlen|cmp|ncmp|chr|rchr|str|dup|ndup|cpy|ncpy|cat|ncat|tol|toll|toul|"
    r"toull|tod|tof|error)|malloc|calloc|realloc|free|aligned_alloc|posix_memalign|qsort|bsearch|atoi|atol|atof|"
    r"rand|srand|printf|fprintf|vfprintf|vprintf|sprintf|snprintf|vsnprintf|vsprintf|puts|fputs|fputc|putc|putchar|"
    r"fflush|fwrite|stderr|stdout|__\w+_chk|__errno_location|pthread_(?:mutex|once|key|getspecific|setspecific|"
    r"cond|rwlock|self|equal)\w*|clock_gettime|clock|time|gettimeofday|nanosleep|sched_yield|isnan|isinf)$",
    r"(?:__)?(?:sin|cos|tan|asin|acos|atan|atan2|sinh|cosh|tanh|asinh|acosh|atanh|exp|exp2|expm1|log|log2|log10|"
    r"log1p|pow|sqrt|cbrt|hypot|erf|erfc|tgamma|lgamma|ceil|floor|round|lround|llround|trunc|fmod|remainder|fma|"
    r"fmax|fmin|fabs|abs|labs|frexp|ldexp|modf|nextafter|copysign|nan|rint|lrint|llrint|nearbyint|scalbn|ilogb|"
    r"logb|sincos)(?:f|l)?(?:_finite)?$",
)
_DENIED = tuple((category, re.compile(pattern)) for category, pattern in DENIED_ROWS)
_COMPUTE = tuple((category, re.compile(pattern)) for category, pattern in COMPUTE_ROWS)
_ALLOWED = tuple(re.compile(pattern) for pattern in ALLOWED_ROWS)
_OP = re.compile(r"at::_ops::(\w+)::")


_SPECIAL = re.compile(r"(?:typeinfo name|typeinfo|vtable|VTT|construction vtable|guard variable) for ")


def classify(name: str) -> tuple[str, str]:
    """(ALLOWED | COMPUTE | DENIED, category) of one import, spelled demangled (or plain C): judged
    by its qualified name (no return type, template arguments or parameters)."""
    special = _SPECIAL.match(name.strip())
    rest = name.strip()[special.end():] if special else name.strip()
    if special and "::" not in rest:
        return ALLOWED, ""  # the type information of a built-in type
    if re.match(r"operator (?:new|delete)\b", rest):
        return ALLOWED, ""
    rest = re.sub(r"(?:\s*(?:const|volatile|&&|&|noexcept))+$", "", rest)  # qualifiers after the parameters
    text = N.qualified_name(rest) if "(" in rest or " " in rest else rest
    for category, pattern in _DENIED:
        if pattern.match(text):
            return DENIED, category
    op = _OP.match(text)
    if op:
        return (ALLOWED, "ATen allocation, views and copies") if op.group(1) in NON_COMPUTE_OPS else \
            (COMPUTE, "ATen operators that compute")
    if AT_CUDA_QUERIES.match(text):
        return ALLOWED, "device queries and streams"
    if any(p.match(text) for p in _ALLOWED):
        return ALLOWED, ""
    for category, pattern in _COMPUTE:
        if pattern.match(text):
            return COMPUTE, category
    return DENIED, "not on the allow-list"


# what nvcc's own code in an object it compiled imports: the host stub it writes for each non-inline
# __device__ function is a call to exit() (a device function cannot run on the host)
NVCC_STUB_IMPORTS = frozenset({"exit"})


def import_problems(imports: Mapping[str, Iterable[str]], demangled: Mapping[str, str], policy: Policy,
                    nvcc_objects: frozenset[str] = frozenset()) -> list[str]:
    """One reason per class of import ``policy`` rejects (``imports``: object -> raw names), each
    naming its first symbols and their objects; empty when every import is allowed. In
    ``nvcc_objects``, nvcc's stub imports are its own."""
    found: dict[str, list[str]] = {}
    for obj, names in imports.items():
        for raw in names:
            if obj in nvcc_objects and raw in NVCC_STUB_IMPORTS:
                continue
            spelled = demangled.get(raw, raw)
            verdict, category = classify(spelled)
            if verdict == DENIED or (verdict == COMPUTE and policy == STRICT):
                found.setdefault(category, []).append(f"{_short(spelled)} ({obj})")
    reasons = []
    for category, names in found.items():
        shown = "; ".join(names[:NAMES_IN_MESSAGE]) + (f"; and {len(names) - NAMES_IN_MESSAGE} more"
                                                        if len(names) > NAMES_IN_MESSAGE else "")
        reasons.append(f"your code calls {category}: {shown}")
    return reasons


def _short(name: str, limit: int = 120) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."
