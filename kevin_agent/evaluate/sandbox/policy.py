"""What a confined process may touch: ``SandboxPolicy`` and the policies of kevin-agent's children.

Paths are granted by Landlock "beneath" rules: a directory grants everything under it. Nothing
can be carved out of a granted tree, so the user's home, the repository and the run store stay
hidden only if no granted path contains them; policies record any such overlap in ``exposed``.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import site
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Optional

from kevin_agent.evaluate.sandbox import landlock

# System trees every Python/torch/CUDA process reads (world-readable files only).
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/opt/nvidia")
# Kernel interfaces: CUDA, NVML, OpenMP and Python read them (other processes' private files
# under /proc stay closed: Landlock refuses ptrace-level access outside the domain).
KERNEL_READ = ("/proc", "/sys")
# The few files of /etc a Python, torch or CUDA process reads; not the whole of /etc.
ETC_READ = (
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ld.so.preload",
    "/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/etc/localtime", "/etc/timezone",
    "/etc/os-release", "/etc/lsb-release", "/etc/mime.types", "/etc/alternatives",
)
BASIC_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
GPU_DEVICE_GLOBS = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/nvidia-caps-imex-channels")
# The device nodes a GPU worker's start-up layer grants, os.pathsep-separated, set by its parent
# (where /dev can be listed): under the start-up layer /dev is not readable, so the worker's
# candidate layer cannot glob them itself.
DEVICES_ENV = "KEVIN_SANDBOX_DEVICES"
# Programs a start-up or compile step may run (ninja, g++, nvcc, ptxas, ldconfig, sh).
SYSTEM_EXEC = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/opt/nvidia")
# Where users and programs keep their files: hidden (not only unreadable) in a confined child,
# with the protected paths, where they hold no granted path (``namespaces.hide_folders``).
USER_DATA_ROOTS = ("/home", "/root", "/tmp", "/var/tmp", "/mnt", "/media", "/srv")


@dataclass(frozen=True)
class SandboxPolicy:
    """Paths a confined process may use, and whether it may open sockets or start processes.

    ``read_only``: read and list. ``read_write``: also create, write, rename, delete (never
    execute, never make device nodes). ``devices``: device nodes opened read/write with ioctl.
    ``executable``: trees whose programs may be executed, only when ``processes`` is True.
    ``write_files``: existing files under these paths may be written (nothing created or
    removed): ``/proc/self`` (kept literal: it names the confined process), which the CUDA driver
    writes to. ``network``: sockets allowed (never by kevin-agent's own policies).
    ``socket_families``: without ``network``, socket() of these address families still works (the
    GPU driver's own at start-up; empty for candidate code). ``tmpdir``: TMPDIR for the process
    (inside ``read_write``). ``exposed``: protected paths (home, repository) that a granted tree
    contains, so they are readable; empty when the policy hides them all. ``hidden``: folders
    that a relayed child sees as empty, but for the granted paths inside them (their existence
    is hidden too, which Landlock does not do).
    """

    read_only: tuple[str, ...] = ()
    read_write: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    executable: tuple[str, ...] = ()
    write_files: tuple[str, ...] = ()
    network: bool = False
    socket_families: tuple[int, ...] = ()
    processes: bool = False
    tmpdir: Optional[str] = None
    exposed: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    metadata: bool = False
    max_file_bytes: int = 0
    max_processes: int = 0
    max_output_bytes: int = 0
    max_scratch_bytes: int = 0
    max_memory_bytes: int = 0  # RLIMIT_AS of the confined process (0: unchanged)
    label: str = "the process"

    @property
    def relayed(self) -> bool:
        """The launcher forks and watches the child (a PID namespace, output or disk bounds)."""
        return bool(self.max_processes or self.max_output_bytes or self.max_scratch_bytes)

    def granted(self) -> list[str]:
        """Every path this policy grants in some way (what ``hidden`` folders keep visible)."""
        paths = [*self.read_only, *self.read_write, *self.devices, *self.write_files,
                 *(self.executable if self.processes else ())]
        return list(dict.fromkeys(p for p in paths if not p.startswith("/proc/")))

    def landlock_rules(self) -> list[landlock.PathRule]:
        rules = [landlock.PathRule(p, landlock.READ) for p in self.read_only]
        rules += [landlock.PathRule(p, landlock.READ | landlock.WRITE) for p in self.read_write]
        rules += [landlock.PathRule(p, landlock.DEVICE) for p in self.devices]
        rules += [landlock.PathRule(p, landlock.READ | landlock.WRITE_EXISTING) for p in self.write_files]
        if self.processes:
            rules += [landlock.PathRule(p, landlock.READ | landlock.EXECUTE) for p in self.executable]
        return rules

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SandboxPolicy:
        names = {f.name for f in fields(cls)}
        values: dict[str, Any] = {k: (tuple(v) if isinstance(v, list) else v) for k, v in raw.items() if k in names}
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> SandboxPolicy:
        return cls.from_dict(json.loads(text))


# -- path helpers ----------------------------------------------------------------------------

def _real(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(path))


def _contains(outer: str, inner: str) -> bool:
    """``inner`` is ``outer`` or lies beneath it (both real paths)."""
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def _existing(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    seen: list[str] = []
    for path in paths:
        if not path:
            continue
        real = _real(path)
        if os.path.exists(real) and real not in seen:
            seen.append(real)
    return seen


def protected_paths(protect: Sequence[str | os.PathLike[str]] = ()) -> list[str]:
    """The user's home and the given paths (repository, run store), as real paths."""
    found = [str(Path.home())] + [os.fspath(p) for p in protect]
    return _existing(found)


def cuda_homes() -> list[str]:
    """CUDA toolkit trees: CUDA_HOME, CUDA_PATH, the nvcc on PATH, /usr/local/cuda*."""
    candidates = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", "")]
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        nvcc = os.path.join(directory, "nvcc")
        if directory and os.path.isfile(nvcc):
            candidates.append(os.path.dirname(os.path.dirname(_real(nvcc))))
    candidates += sorted(glob.glob("/usr/local/cuda*"))
    homes = [c for c in candidates if c and (os.path.isfile(os.path.join(c, "bin", "nvcc"))
                                             or os.path.isfile(os.path.join(c, "include", "cuda.h")))]
    return [home for home in _existing(homes) if home != "/"]  # /bin/nvcc: never grant the whole disk


TOOL_NAMES = ("cc", "gcc", "c++", "g++", "ninja", "nvcc", "ldconfig")


def toolchain_paths(protect: Sequence[str | os.PathLike[str]] = ()) -> list[str]:
    """Install trees of the compilers and tools on PATH (and $CC, $CXX) that live outside the
    system trees, e.g. /opt/gcc for /opt/gcc/bin/gcc: torch.compile and the compile step run
    them. A tree inside or around a protected path (a compiler in ~/.local/bin) shrinks to the
    binary's own folder."""
    guarded = protected_paths(protect)
    found = []
    names = [*TOOL_NAMES, *((os.environ.get("CC") or "").split()[:1]), *((os.environ.get("CXX") or "").split()[:1])]
    for name in names:
        path = shutil.which(name)
        if not path:
            continue
        binary_dir = os.path.dirname(_real(path))
        tree = os.path.dirname(binary_dir)
        if tree == "/" or any(_contains(tree, g) or _contains(g, tree) for g in guarded):
            tree = binary_dir
        if not any(_contains(system, tree) for system in SYSTEM_EXEC):
            found.append(tree)
    return _existing(found)


def _package_dir(name: str) -> Optional[str]:
    """The directory of an installed package, found without importing it."""
    module = sys.modules.get(name)
    origin = getattr(module, "__file__", None) if module is not None else None
    if origin is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
        origin = spec.origin if spec is not None else None
    if not origin or origin in ("built-in", "frozen"):
        return None
    return os.path.dirname(_real(origin))


PACKAGE_TREES = ("site-packages", "dist-packages")


def python_read_paths() -> list[str]:
    """The interpreter's prefixes, sys.path entries inside them (or in site-packages), torch's
    and kevin_agent's package directories: never the working directory or a source checkout
    that sys.path merely points into (only kevin_agent's own package directory from there)."""
    prefixes = _existing([sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix])
    sites = _existing(list(site.getsitepackages()) + [site.getusersitepackages()])
    roots = prefixes + sites
    cwd = _real(os.getcwd())
    entries = []
    for entry in sys.path:
        if not entry or not os.path.isabs(entry):
            continue  # '' and relative entries are the working directory
        real = _real(entry)
        if real == cwd or not os.path.exists(real):
            continue
        if any(_contains(root, real) for root in roots) or os.path.basename(real) in PACKAGE_TREES:
            entries.append(real)  # a site-packages a .pth file adds (a shared venv) is a package tree too
    packages = [p for p in (_package_dir("torch"), _package_dir("kevin_agent")) if p]
    return _existing(prefixes + entries + packages)


def library_paths() -> list[str]:
    """LD_LIBRARY_PATH directories (the GPU driver's libraries often live there)."""
    return _existing(os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep))


def device_paths(gpu: bool = True) -> list[str]:
    """The basic device nodes, and the GPU's (``/dev/nvidia*``, found by listing /dev) when ``gpu``."""
    found = list(BASIC_DEVICES)
    if gpu:
        for pattern in GPU_DEVICE_GLOBS:
            found += sorted(glob.glob(pattern))
    return [p for p in dict.fromkeys(found) if os.path.exists(p)]


def system_read_paths(extra_read: Sequence[str | os.PathLike[str]] = ()) -> list[str]:
    """Everything a Python + torch + CUDA process reads: prefixes, packages, CUDA, system trees."""
    return _existing([*python_read_paths(), *cuda_homes(), *library_paths(), *SYSTEM_READ, *ETC_READ,
                      *KERNEL_READ, *extra_read])


# The CUDA driver writes into /proc/self during initialisation (it fails with error 304 otherwise).
PROC_SELF_WRITE = ("/proc/self",)
# Address families the CUDA driver opens a socket of while it initialises (start-up layer only).
DRIVER_SOCKET_FAMILIES = (1,)  # AF_UNIX


def _policy(read: Sequence[str], write: Sequence[str | os.PathLike[str]], *, gpu: bool,
            protect: Sequence[str | os.PathLike[str]],
            processes: bool = False, executable: Sequence[str] = (), tmpdir: Optional[str] = None,
            socket_families: Sequence[int] = (), devices: Optional[Sequence[str]] = None) -> SandboxPolicy:
    write_real = _existing(write)
    read_real = [p for p in _existing(read) if p not in write_real]
    executable_real = _existing(executable) if processes else []
    guarded = [p for p in protected_paths(protect) if not any(_contains(w, p) for w in write_real)]
    exposed = []
    for secret in guarded:
        holders = [g for g in read_real + write_real + executable_real if _contains(g, secret)]
        if holders:
            exposed.append(f"{secret} (inside {holders[0]})")
    granted = read_real + write_real + executable_real
    hidden = [p for p in _existing([*protected_paths(protect), *USER_DATA_ROOTS])
              if os.path.isdir(p) and not any(_contains(g, p) for g in granted)]
    return SandboxPolicy(
        read_only=tuple(read_real), read_write=tuple(write_real),
        devices=tuple(device_paths(gpu) if devices is None else [d for d in devices if os.path.exists(d)]),
        executable=tuple(executable_real), write_files=PROC_SELF_WRITE if gpu else (), network=False,
        socket_families=tuple(socket_families), processes=processes,
        tmpdir=_real(tmpdir) if tmpdir else (write_real[0] if write_real else None), exposed=tuple(exposed),
        hidden=tuple(hidden),
    )


MIB = 1024 * 1024
GIB = 1024 * MIB
# Bounds of each child (tests/test_attacks_os.py pushes past each). Processes count threads too.
COMPILE_BOUNDS = {"max_processes": 1024, "max_file_bytes": 2 * GIB, "max_output_bytes": 16 * MIB,
                  "max_scratch_bytes": 4 * GIB, "label": "your compile"}  # torch's precompiled header: 0.8 GB
RECORD_BOUNDS = {"max_processes": 512, "max_file_bytes": 64 * MIB, "max_output_bytes": 16 * MIB,
                 "max_scratch_bytes": 256 * MIB, "label": "your module's top level"}
WORKER_BOUNDS = {"max_processes": 2048, "max_file_bytes": 1 * GIB, "max_output_bytes": 16 * MIB,
                 "max_scratch_bytes": 4 * GIB, "label": "your code"}
# Listing the kernels of a built .so (provenance.symbols): a parser, no threads, a JSON line out.
LISTING_BOUNDS = {"max_processes": 301, "max_file_bytes": 1 * MIB, "max_output_bytes": 1 * MIB,
                  "max_scratch_bytes": 16 * MIB, "max_memory_bytes": 1 * GIB, "label": "the kernel listing"}


def bounded(policy: SandboxPolicy, bounds: dict[str, Any]) -> SandboxPolicy:
    """``policy`` with ``bounds`` (a dict of the bound fields) set."""
    return replace(policy, **bounds)


# -- kevin-agent's children --------------------------------------------------------------------

def worker_policy(scratch_dir: str | os.PathLike[str], build_cache_entry_dirs: Sequence[str | os.PathLike[str]] = (),
                  extra_read: Sequence[str | os.PathLike[str]] = (), *, gpu: bool = True,
                  protect: Sequence[str | os.PathLike[str]] = (),
                  devices: Optional[Sequence[str]] = None) -> SandboxPolicy:
    """Candidate code: read the system, the Python/torch/CUDA installs and this candidate's built
    extensions; read and write only ``scratch_dir`` (also TMPDIR); GPU device nodes when ``gpu``;
    no sockets, no processes. ``protect``: the repository, the run store (the home is always).
    ``devices``: the device nodes to grant, when this process cannot list /dev (a worker under
    its start-up layer: its parent's ``device_paths``); default ``device_paths(gpu)``."""
    read = system_read_paths([*build_cache_entry_dirs, *extra_read])
    policy = _policy(read, [os.fspath(scratch_dir)], gpu=gpu, protect=protect, tmpdir=os.fspath(scratch_dir),
                     devices=devices)
    return bounded(policy, WORKER_BOUNDS)


def startup_policy(job_dir: str | os.PathLike[str], cache_root: str | os.PathLike[str] | None = None,
                   extra_read: Sequence[str | os.PathLike[str]] = (),
                   extra_write: Sequence[str | os.PathLike[str]] = (), *, gpu: bool = True,
                   protect: Sequence[str | os.PathLike[str]] = ()) -> SandboxPolicy:
    """A GPU worker from its first instruction (before torch starts threads) until the candidate
    runs: worker_policy's reads plus the whole build cache, writes in the job directory and the
    compile caches (``extra_write``: torch.compile's inductor and Triton caches, the
    speed-of-light cache), and system programs may run (Triton's ptxas, the C compiler, ldconfig).
    The candidate phase then adds ``worker_policy`` on top: see ``confine``."""
    tools = toolchain_paths(protect)
    read = system_read_paths([*([cache_root] if cache_root else []), *tools, *extra_read])
    executable = [*SYSTEM_EXEC, *cuda_homes(), *python_read_paths(), *tools]
    write = [os.fspath(job_dir), *(os.fspath(p) for p in extra_write)]
    policy = _policy(read, write, gpu=gpu, protect=protect, processes=True,
                     executable=executable, tmpdir=os.fspath(job_dir),
                     socket_families=DRIVER_SOCKET_FAMILIES if gpu else ())
    return bounded(policy, {**WORKER_BOUNDS, "metadata": True})


def compile_policy(build_dir: str | os.PathLike[str], extra_read: Sequence[str | os.PathLike[str]] = (),
                   *, protect: Sequence[str | os.PathLike[str]] = ()) -> SandboxPolicy:
    """A compile step (ninja, nvcc, g++) on model-written sources: read the toolchain, torch's
    headers and ``extra_read`` (the precompiled header); write only ``build_dir`` (also TMPDIR);
    run system and CUDA programs; no sockets, no GPU."""
    tools = toolchain_paths(protect)
    read = system_read_paths([*tools, *extra_read])
    executable = [*SYSTEM_EXEC, *cuda_homes(), *python_read_paths(), *tools]
    policy = _policy(read, [os.fspath(build_dir)], gpu=False, protect=protect, processes=True,
                     executable=executable, tmpdir=os.fspath(build_dir))
    return bounded(policy, COMPILE_BOUNDS)


def record_policy(scratch_dir: str | os.PathLike[str], *,
                  protect: Sequence[str | os.PathLike[str]] = ()) -> SandboxPolicy:
    """The CPU-only child that runs a candidate's top level to record its load_inline calls."""
    return bounded(worker_policy(scratch_dir, gpu=False, protect=protect), RECORD_BOUNDS)


def listing_policy(scratch_dir: str | os.PathLike[str], *,
                   protect: Sequence[str | os.PathLike[str]] = ()) -> SandboxPolicy:
    """The CPU-only child that parses a built extension for its kernels (the module comes in
    on its stdin, opened by the parent): no processes, no sockets, 1 GB of address space."""
    return bounded(worker_policy(scratch_dir, gpu=False, protect=protect), LISTING_BOUNDS)
