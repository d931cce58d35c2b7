"""The VS Code extension in a real VS Code: code-server (pinned in package.json here) serves the
workbench with editors/vscode installed, headless Chromium (Debian's, driven by playwright-core in
drive.mjs) plays the user: open model.py, click the "Kevin: write CUDA kernel" lens, watch the
progress, answer "Accept & commit" in the end-of-run notification. The language server is the
venv's `python -m kevin_agent lsp` with the scripted backend and replayed verdicts (best: 1.80x),
and the commit lands in a temporary git repository.

Needs what scripts/test.sh installs: Debian's chromium, `npm ci` here (code-server, playwright-core)
and the compiled extension. Anything missing fails the test with the step to run; nothing skips.
Set KEVIN_SCREENSHOT_DIR=docs/screenshots to keep the accept screenshot for the docs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from loop_fixtures import VERDICTS, timed, write_script

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "lsp"))  # the LSP tests' repo fixture: model.py, Model + Scale
from lsp_support import git, make_repo  # noqa: E402

EXTENSION = ROOT / "editors" / "vscode"
CODE_SERVER = HERE / "node_modules" / "code-server" / "out" / "node" / "entry.js"
PLAYWRIGHT = HERE / "node_modules" / "playwright-core"
CHROMIUM = os.environ.get("KEVIN_CHROMIUM", "/usr/bin/chromium")

pytestmark = [pytest.mark.vscode, pytest.mark.timeout(300)]

# (trajectory, turn) -> marker of the recorded answer; "good" replays as correct at 1.80x
PLAN = {(0, 0): "slow", (1, 0): "wrong", (0, 1): "good", (1, 1): "broken"}
REPLAY_DELAY_S = 1.5  # per candidate: the run lasts a few seconds, long enough to watch it

DRIVER_TIMEOUT_S = 240


def _missing_tools() -> list[str]:
    """What scripts/test.sh should have installed, as the steps to install it."""
    missing = []
    if shutil.which("node") is None:
        missing.append("Node.js 20 (`node` on PATH)")
    if not Path(CHROMIUM).is_file():
        missing.append(f"Chromium at {CHROMIUM} (apt-get install chromium)")
    if not CODE_SERVER.is_file() or not PLAYWRIGHT.is_dir():
        missing.append("code-server and playwright-core (scripts/test.sh: `npm ci` in tests/vscode_e2e)")
    if not (EXTENSION / "out" / "extension.js").is_file():
        missing.append("the compiled extension (cd editors/vscode && npm ci && npm run compile)")
    if not (EXTENSION / "node_modules" / "vscode-languageclient").is_dir():
        missing.append("the extension's node_modules (cd editors/vscode && npm ci)")
    return missing


def write_replay(path: Path) -> Path:
    verdicts = {**VERDICTS, "good": timed(1.8)}
    path.write_text(json.dumps({"by_marker": {f"# kevin-test: {m}": v for m, v in verdicts.items()},
                                "delay_s": REPLAY_DELAY_S}))
    return path


def user_settings(user_data: Path) -> None:
    """VS Code user settings: the server command from this venv, the scripted backend, and a quiet
    workbench (no trust prompt, welcome page, tips or git scanning)."""
    settings = {
        "kevin.serverCommand": [sys.executable, "-m", "kevin_agent", "lsp"],
        "kevin.backend": "scripted",  # the script file comes from KEVIN_SCRIPT
        "kevin.trajectories": 2,
        "kevin.turns": 2,
        "security.workspace.trust.enabled": False,
        "workbench.startupEditor": "none",
        "workbench.tips.enabled": False,
        "extensions.ignoreRecommendations": True,
        "telemetry.telemetryLevel": "off",
        "update.mode": "none",
        "git.enabled": False,
    }
    (user_data / "User").mkdir(parents=True)
    (user_data / "User" / "settings.json").write_text(json.dumps(settings, indent=2))


def install_extension(extensions: Path) -> None:
    """What *Install Extension from Location* does: the folder (compiled, with its node_modules)
    under <publisher>.<name>-<version> in the extensions directory."""
    manifest = json.loads((EXTENSION / "package.json").read_text())
    extensions.mkdir()
    name = f"{manifest['publisher']}.{manifest['name']}-{manifest['version']}"
    (extensions / name).symlink_to(EXTENSION, target_is_directory=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env(tmp_path: Path, script: Path, replay: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEVIN_", "OPENAI_"))}
    home = tmp_path / "home"
    home.mkdir()
    env.update(
        KEVIN_EVALUATOR=f"replay:{replay}", KEVIN_SCRIPT=str(script),
        HOME=str(home),  # no user git, kevin or code-server config leaks in
        XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_CACHE_HOME=str(home / ".cache"), GIT_CONFIG_NOSYSTEM="1",
    )
    return env


def stop_group(process: subprocess.Popen) -> None:
    """End a process started in its own session and everything in its process group (for
    code-server: its extension host and the language server it started)."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the rest of the group gets a moment to exit
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(5)


def stop_mentioning(marker: str) -> None:
    """Kill leftover processes whose command line names ``marker`` (this test's own temporary
    folder): Chromium runs in its own process group, apart from node's."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture()
def code_server(tmp_path):
    """code-server on a free loopback port with the extension installed: (url, repo, log path)."""
    missing = _missing_tools()
    if missing:
        pytest.fail("the VS Code end-to-end test needs: " + "; ".join(missing)
                    + " (bash scripts/test.sh installs all of it)", pytrace=False)
    repo = make_repo(tmp_path)
    script = write_script(tmp_path / "script.json", PLAN)
    replay = write_replay(tmp_path / "replay.json")
    user_data, extensions = tmp_path / "user-data", tmp_path / "extensions"
    user_settings(user_data)
    install_extension(extensions)
    port = free_port()
    log = tmp_path / "code-server.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            ["node", str(CODE_SERVER), "--auth", "none", "--bind-addr", f"127.0.0.1:{port}",
             "--user-data-dir", str(user_data), "--extensions-dir", str(extensions),
             "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust",
             "--disable-getting-started-override", str(repo)],
            cwd=repo, env=server_env(tmp_path, script, replay), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                pytest.fail(f"code-server exited ({process.returncode}):\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"code-server did not answer on {url} in 90 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield url, repo, log
    finally:
        stop_group(process)
        stop_mentioning(str(tmp_path))


def drive(tmp_path: Path, url: str, repo: Path, answer: str, after_answer: str) -> dict:
    """Run drive.mjs; its JSON result (what the browser saw), or a failure naming what it saw."""
    out = tmp_path / "browser"
    out.mkdir()
    config = {
        "url": url, "folder": str(repo), "file": "model.py", "className": "Model",
        "chromium": CHROMIUM, "profileDir": str(tmp_path / "chromium-profile"), "outDir": str(out),
        "answer": answer, "afterAnswer": after_answer,
        # generous: the first activation of the extension and of Python support take a while
        "stepTimeoutMs": 60_000, "lensTimeoutMs": 120_000, "runTimeoutMs": 120_000,
    }
    config_path = tmp_path / "drive.json"
    config_path.write_text(json.dumps(config))
    process = subprocess.Popen(["node", str(HERE / "drive.mjs"), str(config_path)], cwd=HERE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=DRIVER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stop_group(process)
        stdout, stderr = process.communicate()
        pytest.fail(f"drive.mjs ran past {DRIVER_TIMEOUT_S} s\n{stdout[-3000:]}\n{stderr[-3000:]}")
    finally:
        stop_mentioning(str(config["profileDir"]))
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        pytest.fail(f"drive.mjs printed no result (exit {process.returncode}):\n"
                    f"{stdout[-3000:]}\n{stderr[-3000:]}")
    result = json.loads(lines[-1])
    result["returncode"] = process.returncode
    result["stderr"] = stderr[-3000:]
    return result


def test_vscode_lens_run_progress_question_accept_commits(tmp_path, code_server):
    url, repo, log = code_server
    initial = git(repo, "rev-parse", "HEAD").strip()

    seen = drive(tmp_path, url, repo, answer="Accept & commit", after_answer="committed")
    context = json.dumps(seen, indent=1) + "\n--- code-server log ---\n" + log.read_text()[-3000:]
    assert seen["returncode"] == 0 and "error" not in seen, context

    # 1. the lens above each nn.Module class; the one above `class Model` was clicked
    # (clickable: Model's; Scale has no example inputs, so its lens is text only, with the reason)
    assert seen["lenses"] == ["Kevin: write CUDA kernel"], context
    assert any(line.startswith("Kevin: write CUDA kernel (unavailable: Scale has no example inputs")
               for line in seen["lensLines"]), context
    assert 0 < seen["clickedLensAboveClass"] < 60, context

    # 2.-3. the run went on: work-done progress in the status bar ("Kevin: Model: <summary>"),
    # updated as verdicts came in, and the running lens "<summary> | cancel"
    progress = [p for p in seen["progress"] if p.startswith("Kevin: Model: ")]
    assert len(progress) >= 2, context  # distinct texts: the progress moved
    assert any(line.startswith("Kevin: ") and line.endswith(" | cancel")
               for line in seen["lensLines"]), context

    # 3. the end-of-run question, with its three answers
    question = seen["question"]
    assert question["message"].startswith("Kevin: 1.80x vs eager for Model"), context
    assert "1.20x vs torch.compile" in question["message"], context
    assert question["buttons"] == ["Accept & commit", "Show diff", "Discard"], context
    shot = Path(seen["screenshot"])
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", context
    if os.environ.get("KEVIN_SCREENSHOT_DIR"):
        shutil.copyfile(shot, Path(os.environ["KEVIN_SCREENSHOT_DIR"]) / "vscode-accept.png")

    # 4. "Accept & commit": one new commit holding exactly the kernel files, numbers in its message
    assert seen["afterAnswer"].startswith("Kevin: committed") and "Model" in seen["afterAnswer"], context
    commits = git(repo, "rev-list", f"{initial}..HEAD").split()
    assert len(commits) == 1, (commits, context)
    message = git(repo, "log", "-1", "--format=%B")
    assert "Model" in message and "1.80x" in message, message
    committed = git(repo, "show", "--name-only", "--format=", "HEAD").split()
    assert any(p.endswith(".cu") for p in committed) and "model_cuda.py" in committed, committed
    assert "model.py" not in committed, committed
    assert commits[0][:10] in seen["afterAnswer"], (commits, seen["afterAnswer"])
    for name in committed:  # what VS Code left in its buffers does not differ from the commit
        assert (repo / name).read_text().strip(), name
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert "__global__" in git(repo, "show", f"HEAD:{next(p for p in committed if p.endswith('.cu'))}")
