"""What hostile candidate code tries, as source snippets: the self-check and the tests run them
(at a module's top level or inside ``forward``) in confined and unconfined children.

Each snippet raises when the attempt fails. Names it may use: the modules of ``PRELUDE`` and
``T``, a dict of targets prepared by the parent: ``home_file``, ``home_dir``, ``repo_dir``,
``repo_file``, ``port`` (a TCP listener on 127.0.0.1), ``victim_pid`` (a process outside the
sandbox), ``scratch``.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    _check(_libc.syscall(ctypes.c_long(445), ctypes.c_long(fd), ctypes.c_long(1), ctypes.byref(rule), ctypes.c_long(0)),
           "landlock_add_rule")
    _check(_libc.syscall(ctypes.c_long(446), ctypes.c_long(fd), ctypes.c_long(0)), "landlock_restrict_self")
    return open(path).read()

def _unshare_user():
    _check(_libc.unshare(0x10000000), "unshare(CLONE_NEWUSER)")
'''


@dataclass(frozen=True)
class Attack:
    name: str
    what: str
    code: str  # one statement; raises when the attempt fails
    single_threaded: bool = False  # only meaningful in a process without threads (unshare)
    last: bool = False  # changes the process (run after the others)


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
    for attack in ATTACKS + LEGIT:
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
