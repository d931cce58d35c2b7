"""Attacks on the compile path (issue 18), each kept as a test: what a candidate's flags, paths,
sizes and compiles could reach, and what stops it now. Every attack has a control that shows it
is real: the same flag through g++ without kevin-agent, the same compile unconfined, the same
expression evaluated without bounds. No nvcc: each attack is stopped before a CUDA compile.

The OS-level attacks on the sandbox itself (metadata calls, process limits, output caps) live in
the sandbox's own suite; this file is what reaches compile children and the parent."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kevin_agent.eval_modes import SandboxMode
from kevin_agent.evaluate.build.cache import MODULE_FOLDER, BuildCache, entry_dir, take_module
from kevin_agent.evaluate.build.compile import compile_candidate
from kevin_agent.evaluate.build.flags import pch_flags
from kevin_agent.evaluate.build.layout import Layout
from kevin_agent.evaluate.build.ninja_file import Step, run_confined
from kevin_agent.evaluate.processes import scrubbed_environment
from kevin_agent.evaluate.source.calls import ExtensionSpec
from kevin_agent.evaluate.verdicts import static_verdict

CXX = shutil.which("g++") or shutil.which("c++")
needs_cxx = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")
API_KEY = "sk-kevin-attack-test-0123456789"


def _landlock() -> bool:
    from kevin_agent.evaluate.sandbox import probe

    return probe().available


needs_sandbox = pytest.mark.skipif(not _landlock(), reason="this host cannot confine (no Landlock/seccomp)")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's home with a secret file, and the API keys in the parent's environment."""
    folder = tmp_path / "home"
    folder.mkdir()
    (folder / "secret").write_text("TOP-SECRET-LINE\n")
    (folder / "victim").write_text("untouched\n")
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.setenv("KEVIN_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("SOME_UNLISTED_NAME", API_KEY)
    return folder


def candidate(load_extra: str) -> str:
    return textwrap.dedent(f'''\
        import torch
        from torch.utils.cpp_extension import load_inline

        cuda_source = r"""
        __global__ void k(float* y) {{ y[0] = 1.f; }}
        torch::Tensor f(torch::Tensor x) {{ k<<<1, 1>>>(x.data_ptr<float>()); return x; }}
        """
        ext = load_inline(name="e", cpp_sources="torch::Tensor f(torch::Tensor x);", cuda_sources=cuda_source,
                          functions=["f"]{load_extra})


        class ModelNew(torch.nn.Module):
            def forward(self, x):
                return ext.f(x)
        ''')


def gxx(flags: list[str], folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The control: g++ on an empty file with ``flags``, as the old header build ran it."""
    source = folder / "empty.cpp"
    source.write_text("int kevin_empty;\n")
    return subprocess.run([CXX or "g++", *flags, "-c", str(source), "-o", str(folder / "empty.o")], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=120)


# ---------- flags: -wrapper, -MD -MF, -include (refused before any compiler runs) ----------

WRAPPER = ["-wrapper", "/bin/sh,-c,cat $HOME/secret > $HOME/leak; echo $KEVIN_API_KEY >> $HOME/leak"]


@needs_cxx
def test_wrapper_shell_reading_the_home_and_the_api_key_is_refused(home: Path, tmp_path: Path) -> None:
    control = gxx(WRAPPER, tmp_path, dict(os.environ))
    assert (home / "leak").read_text().split() == ["TOP-SECRET-LINE", API_KEY], control.stderr  # the attack is real
    (home / "leak").unlink()

    code = candidate(f", extra_cflags={WRAPPER!r}")
    verdict = static_verdict(code)
    assert verdict is not None and "The flag '-wrapper /bin/sh,-c,cat" in verdict.message
    assert "extra_cflags" in verdict.message and "1 problem" not in verdict.message
    outcome = compile_candidate(code, BuildCache(tmp_path / "cache", arch="9.0"))
    assert not outcome.ok and "'-wrapper /bin/sh" in outcome.message
    assert not (home / "leak").exists()
    assert not (tmp_path / "cache" / "ext").exists()  # nothing was built or cached


@needs_cxx
def test_dependency_file_into_the_home_is_refused(home: Path, tmp_path: Path) -> None:
    flags = ["-MD", "-MF", str(home / "x"), "-MT", "planted text"]
    gxx(flags, tmp_path, dict(os.environ))
    assert "planted text" in (home / "x").read_text()  # control: g++ writes where it is told
    (home / "x").unlink()

    spec = ExtensionSpec("e", ("int f();",), extra_cflags=tuple(flags))
    result = BuildCache(tmp_path / "cache", arch="9.0").build(spec)  # a spec found at run time: same check
    assert not result.ok and result.path == "refused"
    assert "'-MD'" in (result.errors or "") and f"'-MF {home / 'x'}'" in (result.errors or "")
    assert not (home / "x").exists()


@needs_cxx
def test_include_of_a_home_file_never_reaches_the_shared_header_build(home: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # control: a header build with the candidate's flags copies the file's line into its output
    leaked = gxx(["-include", str(home / "secret")], tmp_path, dict(os.environ))
    assert "TOP-SECRET-LINE" in leaked.stderr

    # the shared header is built from kevin-agent's own spelling of a few options, never the candidate's
    assert pch_flags(("-include", str(home / "secret"), "-O3", "-DX=1", "-ffast-math")) == ("-O3", "-ffast-math")
    assert pch_flags(("-O2 -g",)) == ("-O2",) and pch_flags(()) == ()
    cache = BuildCache(tmp_path / "cache", arch="9.0")
    seen: list[list[str]] = []
    def ensure_pch(root: Path, tc: object, flags: list[str], **_: object) -> object:
        seen.append(flags)
        return _no_pch()

    monkeypatch.setattr("kevin_agent.evaluate.build.cache.ensure_pch", ensure_pch)
    monkeypatch.setattr(BuildCache, "_run", lambda self, layout, *a, **k: _failed_run(layout))
    monkeypatch.setattr(BuildCache, "toolchain", _fake_toolchain())
    (tmp_path / "build.log").write_text("")
    cache._build_into(ExtensionSpec("e", ("int f();",), ("__global__ void k() {}",),
                                    extra_cflags=("-O3", "-DKEVIN_CANDIDATE_MACRO=1")), "ab" * 32, tmp_path)
    assert seen and all("-DKEVIN_CANDIDATE_MACRO=1" not in flags for flags in seen)
    assert all(flag in ("-O3",) or flag in _fake_toolchain().cxx_flags(()) for flags in seen for flag in flags)
    # and the flag itself is refused statically
    verdict = static_verdict(candidate(f", extra_cflags=['-include', {str(home / 'secret')!r}]"))
    assert verdict is not None and "The flag '-include " in verdict.message


def _no_pch():
    from kevin_agent.evaluate.build.ninja_file import PchInfo

    return PchInfo(None, 0.0)


def _failed_run(layout: Layout):
    from kevin_agent.evaluate.build.cache import BuildResult

    return BuildResult(False, 0.0, False, None, "x", layout.path, None)


def _fake_toolchain():
    from kevin_agent.evaluate.build.flags import Toolchain

    return Toolchain("/usr/local/cuda", "/usr/local/cuda/bin/nvcc", "g++", "9.0", "2", "13", "13", "c++17", 1,
                     (), (), ())


@pytest.mark.parametrize("argument, value, named", [
    ("extra_cuda_cflags", ["-ccbin", "/root/cc"], "-ccbin"),
    ("extra_cuda_cflags", ["--keep", "--keep-dir", "/root"], "--keep"),
    ("extra_cuda_cflags", ["-Xcompiler", "-fPIC,-wrapper,/bin/sh"], "-Xcompiler -fPIC,-wrapper,/bin/sh"),
    ("extra_cuda_cflags", ["-optf", "/root/flags"], "-optf"),
    ("extra_ldflags", ["-Wl,-T,/root/evil.ld"], "-Wl,-T,/root/evil.ld"),
    ("extra_ldflags", ["/root/evil.o"], "/root/evil.o"),
    ("extra_ldflags", ["-lssl"], "-lssl"),
    ("extra_cflags", ["@/root/flags"], "@/root/flags"),
    ("extra_cflags", ["-B/root/bin"], "-B/root/bin"),
    ("extra_cflags", ["-specs=/root/specs"], "-specs=/root/specs"),
    ("extra_cflags", ["-I../../.."], "-I../../.."),
    ("extra_include_paths", ["/root"], "/root"),
    ("extra_include_paths", ["inc/../../x"], "inc/../../x"),
])
def test_flags_and_paths_off_the_allow_list_are_refused_by_name(argument: str, value: list[str], named: str) -> None:
    verdict = static_verdict(candidate(f", {argument}={value!r}"))
    assert verdict is not None and f"'{named}" in verdict.message and argument in verdict.message
    result = BuildCache(Path("/nonexistent-kevin-cache"), arch="9.0").build(
        ExtensionSpec("e", ("int f();",), **{argument: tuple(value)}))
    assert not result.ok and f"'{named}" in (result.errors or "")


def test_build_directory_is_refused() -> None:
    verdict = static_verdict(candidate(", build_directory='/root/.cache/x'"))
    assert verdict is not None and "build_directory" in verdict.message


def test_flags_computed_at_run_time_are_checked_by_the_build(tmp_path: Path) -> None:
    code = candidate(", extra_cflags=['-O3', '-wr' + 'apper'.upper().lower()]")
    assert static_verdict(code) is None  # not a constant: the static stage cannot see it
    result = BuildCache(tmp_path, arch="9.0").build(ExtensionSpec("e", ("int f();",), extra_cflags=("-wrapper",)))
    assert not result.ok and "'-wrapper'" in (result.errors or "")


# ---------- the environment of every child ----------

@needs_sandbox
def test_a_compile_sees_no_api_key_and_its_home_is_its_folder(home: Path, tmp_path: Path) -> None:
    from kevin_agent.evaluate.sandbox import compile_policy, launch_command

    work = tmp_path / "work"
    work.mkdir()
    status, output = run_confined(["/usr/bin/env"], work, 60, lambda argv: launch_command(
        compile_policy(work), argv, "required"))
    assert status == 0, output
    assert API_KEY not in output and "SOME_UNLISTED_NAME" not in output
    assert f"HOME={work}" in output.splitlines() and f"TMPDIR={work}" in output.splitlines()
    control = subprocess.run(["/usr/bin/env"], capture_output=True, text=True, timeout=30)  # the parent has it
    assert API_KEY in control.stdout


@pytest.mark.parametrize("confined", [pytest.param(True, marks=needs_sandbox), False], ids=["confined", "control"])
def test_a_compile_runs_niced_below_kevin(tmp_path: Path, confined: bool) -> None:
    """A batch's builds fill every core: they must leave the CPU to the GPU lane's worker first
    (issue 20). Whatever a compile starts inherits it, through the sandbox too."""
    from kevin_agent.evaluate.sandbox import compile_policy, launch_command

    nice = shutil.which("nice", path="/usr/bin:/bin")
    assert nice is not None
    confine = (lambda argv: launch_command(compile_policy(tmp_path), argv, "required")) if confined else None
    status, output = run_confined([nice], tmp_path, 60, confine)  # without arguments: prints its niceness
    assert status == 0, output
    assert int(output.strip().splitlines()[-1]) == min(19, os.nice(0) + 10)


def test_every_child_environment_is_an_allow_list(home: Path) -> None:
    env = scrubbed_environment(scratch="/scratch")
    assert API_KEY not in env.values() and env["HOME"] == env["TMPDIR"] == "/scratch"
    for name in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "LD_PRELOAD", "PYTHONSTARTUP", "GIT_DIR"):
        assert name not in scrubbed_environment({name: "x", "PATH": "/bin"})


# ---------- the parent never follows a path a compile could replace ----------

EVIL_SCRIPT = """\
ln -sf "$VICTIM" ../build.log
mkdir -p "$OTHER_ENTRY" && echo '{"ok": false}' > "$OTHER_ENTRY/result.json"
ln -sf "$TARGET_FILE" kevin_attack.so
true
"""


def _evil_build(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, sandbox: SandboxMode):
    """A real BuildCache._run whose 'compiler' is a shell script doing what a hijacked compile
    did: link build.log to a home file, write another cache entry, link its module to a secret."""
    cache = BuildCache(tmp_path / "cache", arch="9.0")
    cache.sandbox = sandbox
    other = entry_dir(cache.root, "cd" * 32)
    monkeypatch.setenv("VICTIM", str(home / "victim"))
    monkeypatch.setenv("TARGET_FILE", str(home / "secret"))
    monkeypatch.setenv("OTHER_ENTRY", str(other))
    monkeypatch.setattr("kevin_agent.evaluate.processes.ALLOWED_VARIABLES",
                        frozenset({"PATH", "VICTIM", "TARGET_FILE", "OTHER_ENTRY"}))

    def write_ninja(work: Path, tc: object, steps: list[Step], target: str, ldflags: list[str],
                    prebuilt: tuple[str, ...] = ()) -> None:
        (work / "build.ninja").write_text(f"rule sh\n  command = sh evil.sh\nbuild {target}: sh\ndefault {target}\n")

    monkeypatch.setattr("kevin_agent.evaluate.build.cache.write_ninja", write_ninja)
    monkeypatch.setattr(BuildCache, "toolchain", _fake_toolchain())
    folder = tmp_path / "cache" / "tmp" / "attack"
    folder.mkdir(parents=True)
    result = cache._run(Layout("split", {"evil.sh": EVIL_SCRIPT}, []), "kevin_attack", folder, folder / "build.log")
    return result, folder, other


@needs_sandbox
def test_a_confined_compile_cannot_replace_the_log_write_another_entry_or_link_its_module(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, folder, other = _evil_build(tmp_path, home, monkeypatch, "required")
    assert (home / "victim").read_text() == "untouched\n"
    log = (folder / "build.log").read_text()
    assert not (folder / "build.log").is_symlink()
    # Landlock refuses (EACCES), or the path is in a hidden folder's read-only stand-in (EROFS)
    assert "Permission denied" in log or "Read-only file system" in log, log
    assert not other.exists()  # another candidate's entry: out of reach
    assert not result.ok and result.module_path is None and "no usable module" in (result.errors or "")
    assert not (folder / MODULE_FOLDER / "kevin_attack.so").exists()


def test_the_control_unconfined_compile_does_all_three_and_the_parent_still_follows_no_link(
        home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, folder, other = _evil_build(tmp_path, home, monkeypatch, "off")
    assert (folder / "build.log").is_symlink()  # the attack happened: only the sandbox stops these
    assert (other / "result.json").exists()
    assert (home / "victim").read_text() == "untouched\n"  # the parent opened the log without following it
    assert not result.ok and result.module_path is None  # the linked module was not taken


# ---------- a hijacked compile and the objects other candidates' builds reuse ----------

POISON_SCRIPT = """\
printf POISON > bindings.o
mkdir -p "$STORE/$ENTRY" && printf POISON > "$STORE/$ENTRY/object.o"
touch evil.done
"""
KEY = "ab" * 32


def _poisoning_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandbox: SandboxMode) -> tuple[Path, str]:
    """A real BuildCache._run of a layout with one shared unit (the binding) and one candidate unit
    whose 'compiler' is a script doing what a hijacked compile would, while the binding compiles:
    replace the binding's object in its own folder and plant one under the shared key in the store.
    The shared unit's own compile writes HONEST. Returns the store's object for that key, and the log."""
    cache = BuildCache(tmp_path / "cache", arch="9.0")
    cache.sandbox = sandbox
    monkeypatch.setenv("STORE", str(cache.root / "objects"))
    monkeypatch.setenv("ENTRY", KEY)  # (a name with KEY in it never reaches a child)
    monkeypatch.setattr("kevin_agent.evaluate.processes.ALLOWED_VARIABLES", frozenset({"PATH", "STORE", "ENTRY"}))

    def write_ninja(work: Path, tc: object, steps: list[Step], target: str | None, ldflags: list[str],
                    prebuilt: tuple[str, ...] = ()) -> None:
        if target is None:  # the shared unit's own folder: an honest compile
            text = "rule cc\n  command = printf HONEST > $out\nbuild bindings.o: cc bindings.cpp\ndefault bindings.o\n"
        else:
            text = (f"rule sh\n  command = sh evil.sh\nrule ln\n  command = cp bindings.o $out\n"
                    f"build evil.done: sh evil.sh\nbuild {target}: ln evil.done\ndefault {target}\n")
        (work / "build.ninja").write_text(text)

    monkeypatch.setattr("kevin_agent.evaluate.build.cache.write_ninja", write_ninja)
    monkeypatch.setattr("kevin_agent.evaluate.build.shared_objects.write_ninja", write_ninja)
    monkeypatch.setattr(BuildCache, "toolchain", _fake_toolchain())
    folder = tmp_path / "cache" / "tmp" / "attack"
    folder.mkdir(parents=True)
    steps = [Step("evil.sh", "evil.done", "sh"), Step("bindings.cpp", "bindings.o", "cxx", [], shared_key=KEY)]
    cache._run(Layout("split", {"evil.sh": POISON_SCRIPT, "bindings.cpp": "// ours\n"}, steps), "kevin_attack",
               folder, folder / "build.log")
    return cache.root / "objects" / KEY / "object.o", (folder / "build.log").read_text()


@needs_sandbox
def test_a_hijacked_compile_cannot_poison_the_binding_object_other_builds_reuse(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kept, log = _poisoning_build(tmp_path, monkeypatch, "required")
    assert "sh evil.sh" in log and ("Permission denied" in log or "Read-only file system" in log), log  # it tried
    assert kept.read_text() == "HONEST"  # compiled apart and kept: the store was out of the compile's reach


def test_the_control_unconfined_hijacked_compile_poisons_the_store(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    kept, _ = _poisoning_build(tmp_path, monkeypatch, "off")
    assert kept.read_text() == "POISON"  # without the sandbox the attack lands: only confinement stops it


def test_the_module_is_taken_only_as_a_regular_file(home: Path, tmp_path: Path) -> None:
    (tmp_path / "m.so").symlink_to(home / "secret")
    copy, problem = take_module(tmp_path / "m.so", tmp_path / "lib")
    assert copy is None and "symbolic links" in (problem or "")
    assert (tmp_path / "m.so").read_text() == "TOP-SECRET-LINE\n"  # control: following it reads the secret
    os.mkfifo(tmp_path / "f.so")
    assert take_module(tmp_path / "f.so", tmp_path / "lib")[0] is None  # a FIFO would hang a plain read
    (tmp_path / "ok.so").write_bytes(b"\x7fELF")
    copy, problem = take_module(tmp_path / "ok.so", tmp_path / "lib")
    assert problem is None and Path(copy or "").read_bytes() == b"\x7fELF" and Path(copy or "").parent.name == "lib"


# ---------- the static stage's bounds ----------

BOUNDED = "import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); " \
          "resource.setrlimit(resource.RLIMIT_CPU, (10, 10))\n"


def _bounded_child(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BOUNDED + script], capture_output=True, text=True, timeout=300,
                          env=scrubbed_environment())


@pytest.mark.parametrize("name, header, expected", [
    ("big integer", "N = 10\n" + "N *= N\n" * 40, "over 4096 bits"),
    ("gigabyte string", 'PAD = "x" * 2000000000', "2,000,000,000"),
    ("doubling", 'S = "x" * 1000000\n' + "S += S\n" * 30, "limit is 4,000,000"),
    ("format width", 'S = "%1999999999d" % 1', "wide"),
])
def test_constant_expressions_are_bounded(name: str, header: str, expected: str) -> None:
    code = candidate("").replace("import torch\n", f"import torch\n{header}\n", 1)
    script = ("from kevin_agent.evaluate.verdicts import static_verdict\n"
              f"v = static_verdict({code!r})\nprint(v.details.static_rule if v else None)\n"
              "print(v.message if v else '')\n")
    done = _bounded_child(script)  # 1 GB and 10 s of CPU: the static stage needs far less
    assert done.returncode == 0 and done.stdout.splitlines()[0] == "source-size", done.stderr[-500:]
    assert expected in done.stdout
    control = _bounded_child(header + "\nprint('done')\n")
    assert control.returncode != 0  # control: evaluating the same constants unbounded dies (memory or CPU)


def test_a_source_over_one_megabyte_is_a_static_verdict() -> None:
    verdict = static_verdict(candidate("") + "# " + "x" * 1_000_000 + "\n")
    assert verdict is not None and verdict.details.static_rule == "source-size" and "1,000,000" in verdict.message


def test_sources_recorded_at_run_time_over_the_limit_are_refused(tmp_path: Path) -> None:
    result = BuildCache(tmp_path, arch="9.0").build(ExtensionSpec("e", ("x" * 4_000_001,)))
    assert not result.ok and "4,000,001 characters" in (result.errors or "")



# ---------- the GPU worker's logs and reply: read without following what the worker left ----------

LINKING_WORKER = """\
import os, sys
print("READY", flush=True)
job = sys.stdin.readline().strip()
scratch = os.path.dirname(job)
for name in ("stderr.log", "result.json"):
    os.remove(os.path.join(scratch, name)) if os.path.lexists(os.path.join(scratch, name)) else None
    os.symlink(os.environ["TARGET_FILE"], os.path.join(scratch, name))
sys.exit(3)
"""


def test_a_worker_that_links_its_logs_to_a_home_file_leaks_nothing(home: Path, tmp_path: Path) -> None:
    from kevin_agent.evaluate.isolation import WorkerPool
    from kevin_agent.evaluate.processes import tail_text
    from kevin_agent.evaluate.protocol import WorkerJob, WorkerReply

    script = tmp_path / "linking_worker.py"
    script.write_text(LINKING_WORKER)
    job = WorkerJob("task", "code", Path("unset"), cache_dir=Path("/nonexistent"))
    with WorkerPool([sys.executable, str(script)], scratch_root=tmp_path / "scratch", spare=False,
                    run_timeout_s=60, start_timeout_s=60, extra_env={"TARGET_FILE": str(home / "secret")},
                    keep_scratch=True) as pool:
        result = pool.run(job)
    assert result.crashed and "TOP-SECRET-LINE" not in result.verdict.message + result.stderr_tail
    (left,) = [p for p in (tmp_path / "scratch").iterdir()]
    assert (left / "stderr.log").is_symlink()  # control: the links are there, a plain read leaks the secret
    assert "TOP-SECRET-LINE" in (left / "stderr.log").read_text()
    assert tail_text(left / "stderr.log") == "" and WorkerReply.read(left / "result.json") is None
