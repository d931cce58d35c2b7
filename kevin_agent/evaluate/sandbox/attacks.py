"""What hostile candidate code tries, as source snippets: the self-check and the tests run them
(at a module's top level or inside ``forward``) in confined and unconfined children.

Each snippet raises when the attempt fails. Names it may use: the modules of ``PRELUDE`` and
``T``, a dict of targets prepared by the parent: ``home_file``, ``home_dir``, ``repo_dir``,
``repo_file``, ``port`` (a TCP listener on 127.0.0.1), ``victim_pid`` (a process outside the
sandbox), ``scratch``.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path

PRELUDE = '''
import ctypes, os, resource, socket, subprocess
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.ptrace.restype = ctypes.c_long
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]

def _check(result, what):
    if result == -1:
        code = ctypes.get_errno()
        raise OSError(code, what + ": " + os.strerror(code))
    return result

def _ptrace_attach_detach(pid):
    _check(_libc.ptrace(0x4206, pid, None, None), "ptrace(PTRACE_SEIZE)")
    _check(_libc.ptrace(0x4207, pid, None, None), "ptrace(PTRACE_INTERRUPT)")
    os.waitpid(pid, 0x40000000)
    _check(_libc.ptrace(17, pid, None, None), "ptrace(PTRACE_DETACH)")

def _io_uring_setup():
    params = ctypes.create_string_buffer(120)
    nr = {"x86_64": 425, "aarch64": 425}[os.uname().machine]
    os.close(_check(_libc.syscall(ctypes.c_long(nr), ctypes.c_long(4), params), "io_uring_setup"))

def _landlock_allow_everything_then_read(path):
    class Attr(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]
    class Rule(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]
    _libc.prctl(38, 1, 0, 0, 0)
    attr = Attr(4, 0, 0)  # handles READ_FILE only...
    fd = _check(_libc.syscall(ctypes.c_long(444), ctypes.byref(attr), ctypes.c_long(24), ctypes.c_long(0)),
                "landlock_create_ruleset")
    root = os.open("/", os.O_PATH)
    rule = Rule(4, root)  # ...and grants it everywhere
    _check(_libc.syscall(ctypes.c_long(445), ctypes.c_long(fd), ctypes.c_long(1), ctypes.byref(rule),
                         ctypes.c_long(0)), "landlock_add_rule")
    _check(_libc.syscall(ctypes.c_long(446), ctypes.c_long(fd), ctypes.c_long(0)), "landlock_restrict_self")
    return open(path).read()

def _unshare_user():
    _check(_libc.unshare(0x10000000), "unshare(CLONE_NEWUSER)")

def _chmod_same(path):
    os.chmod(path, os.stat(path).st_mode & 0o7777)

def _chown_same(path):
    info = os.stat(path)
    os.chown(path, info.st_uid, info.st_gid)

def _utime_same(path):
    info = os.stat(path)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))

def _xattr_set_remove(path):
    os.setxattr(path, b"user.kevin_attack", b"1")
    os.removexattr(path, b"user.kevin_attack")

def _refused_as_missing(path):
    try:
        open(path, 'rb').close()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise RuntimeError('the open was refused with errno %d: the file exists' % exc.errno) from None

def _quiet(argv, **kw):
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, close_fds=True, **kw)

def _linger_setsid(marker):
    _quiet(["/bin/sleep", marker], start_new_session=True)

def _linger_double_fork(marker):
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.execv("/bin/sleep", ["sleep", marker])
        finally:
            os._exit(0)
    os.waitpid(pid, 0)

def _many(marker, count):
    for _ in range(count):
        _quiet(["/bin/sleep", marker])

def _flood(megabytes):
    for _ in range(megabytes):
        os.write(1, b"x" * (1 << 20))

def _sparse(folder, size):
    with open(os.path.join(folder, "sparse-" + os.urandom(4).hex()), "wb") as handle:
        handle.truncate(size)
'''


@dataclass(frozen=True)
class Attack:
    name: str
    what: str
    code: str  # one statement; raises when the attempt fails
    single_threaded: bool = False  # only meaningful in a process without threads (unshare)
    last: bool = False  # changes the process (run after the others)
    contained: bool = False  # may "succeed" inside: the parent checks what is left afterwards


ATTACKS: tuple[Attack, ...] = (
    Attack("read_home", "read a file in the user's home", "open(T['home_file']).read()"),
    Attack("list_home", "list the user's home", "os.listdir(T['home_dir'])"),
    Attack("read_repo", "read the task file in the repository", "open(T['repo_file']).read()"),
    Attack("write_repo", "write next to the task file",
           "open(os.path.join(T['repo_dir'], 'pwned-' + os.urandom(6).hex()), 'w').write('x')"),
    Attack("list_repo", "list the repository", "os.listdir(T['repo_dir'])"),
    Attack("tcp_connect", "open a TCP connection to a listener on 127.0.0.1",
           "socket.create_connection(('127.0.0.1', T['port']), timeout=5).close()"),
    Attack("unix_socket", "create a unix socket", "socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()"),
    Attack("spawn_shell", "spawn a shell", "subprocess.run(['/bin/sh', '-c', 'exit 0'], check=True)"),
    Attack("raise_nofile", "raise its RLIMIT_NOFILE",
           "resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)"),
    Attack("raise_cpu", "raise its RLIMIT_CPU",
           "resource.setrlimit(resource.RLIMIT_CPU, (resource.getrlimit(resource.RLIMIT_CPU)[1],) * 2)"),
    Attack("ptrace", "ptrace a process outside the sandbox", "_ptrace_attach_detach(T['victim_pid'])"),
    Attack("read_environ", "read another process's environment",
           "open('/proc/%d/environ' % T['victim_pid'], 'rb').read()"),
    Attack("signal", "signal a process outside the sandbox", "os.kill(T['victim_pid'], 0)"),
    Attack("io_uring", "set up io_uring (a way around system call filters)", "_io_uring_setup()"),
    Attack("mknod", "create a device node in its scratch directory",
           "os.mknod(os.path.join(T['scratch'], 'node-' + os.urandom(6).hex()), 0o20600, os.makedev(1, 3))"),
    Attack("undo_landlock", "lift the file rules with a new Landlock ruleset",
           "_landlock_allow_everything_then_read(T['home_file'])", last=True),
    Attack("new_userns", "create a user namespace", "_unshare_user()", single_threaded=True, last=True),
)

# Issue 18: metadata (Landlock does not cover it: seccomp refuses it), processes that outlive the
# child and process counts (the launcher's PID namespace), output and file sizes (its bounds),
# the run store, the parent. Targets besides those above: ``store_file`` (a run store),
# ``linger`` (a unique sleep duration: processes left behind are found by it), ``parent_pid``.
METADATA_ATTACKS: tuple[Attack, ...] = (
    Attack("chmod_home", "change the mode of a file in the user's home", "_chmod_same(T['home_file'])"),
    Attack("chown_repo", "change the owner of the task file", "_chown_same(T['repo_file'])"),
    Attack("utime_home", "change the times of a file in the user's home", "_utime_same(T['home_file'])"),
    Attack("xattr_repo", "set an extended attribute on the task file", "_xattr_set_remove(T['repo_file'])"),
    # the same calls on a path the child can see and write (its working folder): seccomp's refusal,
    # shown apart from the hiding of the user's folders (where the path is not found at all)
    Attack("chmod_cwd", "change the mode of its own working folder", "_chmod_same('.')"),
    Attack("chown_cwd", "change the owner of its own working folder", "_chown_same('.')"),
    Attack("utime_cwd", "change the times of its own working folder", "_utime_same('.')"),
    Attack("xattr_cwd", "set an extended attribute on its own working folder",
           "_xattr_set_remove('.')"),
)
OS_ATTACKS: tuple[Attack, ...] = METADATA_ATTACKS + (
    Attack("write_home", "write a file into the user's home",
           "open(os.path.join(T['home_dir'], 'pwned-' + os.urandom(6).hex()), 'w').write('x')"),
    Attack("write_store", "append to the run store", "open(T['store_file'], 'ab').write(b'x')"),
    Attack("stat_home", "learn that a file in the user's home exists (stat)", "os.stat(T['home_file'])"),
    Attack("probe_store", "tell the run store's existence from a refused open",
           "_refused_as_missing(T['store_file'])"),
    Attack("signal_parent", "signal the process that started it", "os.kill(T['parent_pid'], 0)"),
    Attack("setsid_linger", "leave a process running in a new session", "_linger_setsid(T['linger'])",
           contained=True),
    Attack("double_fork", "leave a daemon behind (double fork)", "_linger_double_fork(T['linger'])",
           contained=True),
    Attack("fork_bomb", "start 1100 processes", "_many(T['linger'], 1100)"),
    Attack("output_flood", "print 40 MB", "_flood(40)", contained=True),
    Attack("sparse_file", "create an 11 GB sparse file in its working folder", "_sparse(os.getcwd(), 11 << 30)"),
)

_ENOENT, _EACCES, _EPERM, _ESRCH, _EAGAIN, _EFBIG = 2, 13, 1, 3, 11, 27
# The user's folders are hidden in every candidate-facing child (namespaces.hide_folders): what
# Landlock would refuse (EACCES) is not there at all.
_REFUSALS = {"chmod_home": (_ENOENT,), "chown_repo": (_ENOENT,), "utime_home": (_ENOENT,),
             "xattr_repo": (_EPERM,),  # seccomp answers before the path is looked up
             "chmod_cwd": (_EPERM,), "chown_cwd": (_EPERM,), "utime_cwd": (_EPERM,),
             "xattr_cwd": (_EPERM,),
             "write_home": (_ENOENT,), "write_store": (_ENOENT,), "sparse_file": (_EFBIG,),
             "stat_home": (_ENOENT,), "probe_store": (_ENOENT,),
             "signal_parent": (_EPERM, _ESRCH),  # Landlock's signal scope; from a PID namespace: no such pid
             "read_home": (_ENOENT,), "write_repo": (_ENOENT,), "list_repo": (_ENOENT,), "tcp_connect": (_EPERM,),
             "ptrace": (_EPERM, _ESRCH)}


def expected_refusal(attack: Attack, processes: bool) -> tuple[int, ...] | None:
    """The errno values the sandbox answers an ``OS_SUITE`` attack with, in a child that may
    (``processes``: a compile) or may not start processes; None when the attack runs but is
    contained (judged by what is left: processes, output that reached the parent)."""
    if attack.name in _REFUSALS:
        return _REFUSALS[attack.name]
    if attack.name in ("setsid_linger", "double_fork", "fork_bomb") and not processes:
        return (_EPERM,)
    if attack.name == "fork_bomb":
        return (_EAGAIN,)  # the PID namespace's cap
    return None


# The suite tests/test_attacks_os.py and tests/gpu/test_attacks_gpu.py run at every entry point.
OS_SUITE: tuple[Attack, ...] = OS_ATTACKS + tuple(
    a for a in ATTACKS if a.name in ("read_home", "write_repo", "list_repo", "tcp_connect", "ptrace"))

# What ``python -m kevin_agent.evaluate.sandbox`` and ``kevin doctor`` try (idempotent: the
# unconfined control may touch the real home file, changing nothing).
SELF_CHECK_ATTACKS: tuple[Attack, ...] = ATTACKS + METADATA_ATTACKS + tuple(
    a for a in OS_ATTACKS if a.name == "stat_home")

LEGIT: tuple[Attack, ...] = (
    Attack("write_scratch", "write and read back a file in scratch",
           "open(os.path.join(T['scratch'], 'ok.txt'), 'w').write('ok'); "
           "assert open(os.path.join(T['scratch'], 'ok.txt')).read() == 'ok'"),
    Attack("read_proc_self", "read /proc/self/status", "open('/proc/self/status').read()"),
    Attack("read_stdlib", "read the Python standard library", "open(os.__file__).read()"),
    Attack("dev_null", "write to /dev/null", "open(os.devnull, 'w').write('x')"),
    Attack("thread", "start a thread",
           "__import__('threading').Thread(target=lambda: None).start()"),
)


def by_name(name: str) -> Attack:
    for attack in ATTACKS + OS_ATTACKS + LEGIT:
        if attack.name == name:
            return attack
    raise KeyError(name)


def candidate_source(attack: Attack, targets: dict, where: str, torch: bool = False) -> str:
    """A candidate-like module that tries ``attack`` at import (``where="import"``) or inside
    ``ModelNew.forward`` (``where="forward"``); with ``torch``, ModelNew is an ``nn.Module``."""
    head = PRELUDE + f"\nT = {targets!r}\n"
    if torch:
        head += "import torch\n"
    base = "(torch.nn.Module)" if torch else ""
    body = "        return None\n" if torch is False else "        return args[0] if args else None\n"
    if where == "import":
        return head + attack.code + f"\n\nclass ModelNew{base}:\n    def forward(self, *args):\n" + body
    if where == "forward":
        return head + f"\nclass ModelNew{base}:\n    def forward(self, *args):\n        {attack.code}\n" + body
    raise ValueError(where)


RESULT_MARKER = "KEVIN_ATTACK_RESULT:"


def attack_script(attack: Attack, targets: dict) -> str:
    """A program that tries ``attack`` once and prints ``RESULT_MARKER`` + JSON
    ``{"ok": bool, "error": str, "errno": int | None}`` (``python FILE`` or ``attack_run FILE``)."""
    return (PRELUDE + f"\nT = {targets!r}\nimport json as _json, sys as _sys\n"
            "try:\n    " + attack.code + "\n    _r = {'ok': True, 'error': '', 'errno': None}\n"
            "except BaseException as _e:\n"
            "    _r = {'ok': False, 'error': (type(_e).__name__ + ': ' + str(_e))[:300],"
            " 'errno': getattr(_e, 'errno', None)}\n"
            f"_sys.stdout.flush()\nprint('\\n' + {RESULT_MARKER!r} + _json.dumps(_r), flush=True)\n")


def attack_result(output: str) -> dict | None:
    """The result line ``attack_script`` printed, or None (the process was stopped first)."""
    for line in output.splitlines():
        if line.startswith(RESULT_MARKER):
            return dict(json.loads(line[len(RESULT_MARKER):]))
    return None


# -- the parent's side of OS_ATTACKS (CPU and GPU tests) ---------------------------------------

_MARKERS = itertools.count(1)


def make_world(root: Path) -> dict[str, Path]:
    """A fake home with a secret, a repository with a task file and a run store, under ``root``."""
    home, repo = root / "home", root / "repo"
    (repo / ".kevin").mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    (home / "secret.txt").write_text("api key\n")
    (repo / "task.py").write_text("class Model: pass\n")
    (repo / ".kevin" / "runs.sqlite").write_bytes(b"SQLite format 3\x00")
    return {"root": root, "home": home, "repo": repo}


def os_targets(world: dict[str, Path], scratch: Path, port: int, victim: int) -> dict:
    """The ``T`` of an OS attack: the world's paths, a listener's port, this process as the parent,
    ``victim`` (a process to ptrace), ``scratch``, and a fresh ``linger`` marker (a sleep
    duration nothing else uses)."""
    marker = f"{4000 + next(_MARKERS)}.{os.getpid() % 997}"
    return {"home_file": str(world["home"] / "secret.txt"), "home_dir": str(world["home"]),
            "repo_dir": str(world["repo"]), "repo_file": str(world["repo"] / "task.py"),
            "store_file": str(world["repo"] / ".kevin" / "runs.sqlite"), "port": port,
            "victim_pid": victim, "parent_pid": os.getpid(), "scratch": str(scratch), "linger": marker}


def lingering(marker: str) -> list[int]:
    """Processes still alive that an attack started (``sleep MARKER``)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker.encode() in argv and argv[0].endswith(b"sleep"):
                found.append(int(entry))
    return found


def end_lingering(marker: str) -> int:
    """Kill (by id) what an unconfined control left behind; how many there were."""
    pids = lingering(marker)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


# -- many attacks in one child (tests/gpu/test_attacks_gpu.py: one GPU worker job, not one each) --

# Attacks that end the child or take the host with them when nothing stops them, so they run
# alone: the output flood (the parent stops the child at 16 MB: nothing after it would report)
# and the fork bomb (1100 processes; never run unconfined on a shared host). Every other attack
# of OS_SUITE ends with a refused call (or, unconfined, with processes the parent counts).
ALONE = ("fork_bomb", "output_flood")
BATCHED: tuple[Attack, ...] = tuple(a for a in OS_SUITE if a.name not in ALONE)

BATCH_MARKER = "KEVIN_ATTACK_BATCH:"
BATCH_ERROR_CHARS = 80  # per attack: the report stays one line well under the worker's 3000-char error cap

_BATCH_RUNNER = '''
def _kevin_attack_batch():
    """Each attack in turn, T its own targets; the one-line report of how each went."""
    global T
    import json
    results = {}
    for name, targets, attempt in _KEVIN_BATCH:
        T = targets
        try:
            attempt()
            results[name] = {"ok": True, "errno": None, "error": ""}
        except BaseException as exc:
            results[name] = {"ok": False, "errno": getattr(exc, "errno", None),
                             "error": (type(exc).__name__ + ": " + str(exc))[:CHARS]}
    return MARKER + json.dumps(results, separators=(",", ":"))
'''


def batch_definitions(attacks: tuple[Attack, ...], targets: dict[str, dict]) -> str:
    """``PRELUDE``, one function per attack (its body) and ``_kevin_attack_batch()``, which tries
    them in order (those marked ``last`` at the end), ``T`` set to ``targets[name]`` for each, and
    returns the one-line report ``batch_results`` reads."""
    ordered = sorted(attacks, key=lambda a: a.last)
    if any(a.single_threaded for a in ordered):
        raise ValueError("a single-threaded attack cannot share its process")
    functions = "".join(f"def _kevin_attack_{i}():\n    {a.code}\n\n" for i, a in enumerate(ordered))
    table = ",\n    ".join(f"({a.name!r}, {targets[a.name]!r}, _kevin_attack_{i})" for i, a in enumerate(ordered))
    runner = _BATCH_RUNNER.replace("MARKER", repr(BATCH_MARKER)).replace("CHARS", str(BATCH_ERROR_CHARS))
    return f"{PRELUDE}\nT = {{}}\n\n{functions}_KEVIN_BATCH = [\n    {table},\n]\n{runner}\n"


def batch_candidate(source: str, attacks: tuple[Attack, ...], targets: dict[str, dict], where: str) -> str:
    """The candidate ``source`` trying every one of ``attacks`` at import (before its first line)
    or first thing in ``ModelNew.forward``, then raising ``RuntimeError(report)``: the report
    reaches the parent in the error (a GPU verdict's message, a child's traceback) whether the
    attacks were refused or not."""
    head = batch_definitions(attacks, targets)
    if where == "import":
        return head + "raise RuntimeError(_kevin_attack_batch())\n\n" + source
    if where == "forward":
        return (head + source + "\n\ndef _kevin_attacking_forward(self, *args, **kwargs):\n"
                "    raise RuntimeError(_kevin_attack_batch())\n\n\nModelNew.forward = _kevin_attacking_forward\n")
    raise ValueError(where)


def batch_results(text: str) -> dict[str, dict] | None:
    """Each attack's ``{"ok", "errno", "error"}`` from the last report in ``text``; None when there
    is none (the child was stopped first) or it was cut."""
    for line in reversed(text.splitlines()):
        at = line.find(BATCH_MARKER)
        if at >= 0:
            try:
                return dict(json.loads(line[at + len(BATCH_MARKER):]))
            except ValueError:
                return None
    return None


def batch_targets(world: dict[str, Path], scratch: Path, port: int, victim: int,
                  attacks: tuple[Attack, ...]) -> dict[str, dict]:
    """``os_targets`` for each attack: its own ``linger`` marker, so what each leaves is counted apart."""
    return {a.name: os_targets(world, scratch, port, victim) for a in attacks}


def end_batch_lingering(targets: dict[str, dict]) -> dict[str, int]:
    """``end_lingering`` for each attack of a batch: how many processes each left behind."""
    return {name: end_lingering(t["linger"]) for name, t in targets.items()}
