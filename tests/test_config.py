"""Backend settings: flags > environment > config file > defaults; bad values name key and file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kevin_agent.config import (
    DEFAULT_BASE_URL,
    BackendSettings,
    load_config,
    resolve_backend_settings,
)
from kevin_agent.errors import UserInputError


def test_defaults() -> None:
    settings = resolve_backend_settings({}, {}, {})
    assert settings == BackendSettings()
    assert (settings.backend, settings.model, settings.temperature, settings.max_tokens) == (
        "openai", "cognition-ai/Kevin-32B", 0.9, 16384)
    assert settings.resolved_base_url == DEFAULT_BASE_URL == "http://localhost:8000/v1"


def test_pyproject_tool_kevin(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.kevin]\nmodel = "my/model"\nconcurrency = 3\n'
        'temperature = 0.6\naccept_dir = "kernels"\n'
    )
    config = load_config(tmp_path)
    assert config["model"] == "my/model" and config.source == tmp_path / "pyproject.toml"
    settings = resolve_backend_settings({}, {}, config)
    assert (settings.model, settings.concurrency, settings.temperature) == ("my/model", 3, 0.6)


def test_kevin_toml_wins_and_may_be_top_level(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.kevin]\nmodel = "from/pyproject"\n')
    (tmp_path / "kevin.toml").write_text('model = "from/kevin-toml"\nbase_url = "http://gpu:9000/v1"\n')
    config = load_config(tmp_path)
    assert config.source == tmp_path / "kevin.toml"
    settings = resolve_backend_settings({}, {}, config)
    assert settings.model == "from/kevin-toml" and settings.resolved_base_url == "http://gpu:9000/v1"


def test_search_upward_from_a_subfolder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "kevin.toml").write_text('[tool.kevin]\nmax_tokens = 20000\n')
    sub = tmp_path / "src" / "pkg"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    assert load_config(None)["max_tokens"] == 20000


def test_no_file_is_an_empty_config(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    config = load_config(tmp_path)
    assert dict(config) == {} and config.source is None


def test_precedence_flags_env_config() -> None:
    config = {"model": "config/model", "base_url": "http://config/v1", "api_key": "config-key",
              "concurrency": 2}
    env = {"KEVIN_MODEL": "env/model", "OPENAI_API_KEY": "openai-key", "KEVIN_BASE_URL": "http://env/v1"}
    flags = {"model": "flag/model", "base_url": None, "concurrency": None}
    settings = resolve_backend_settings(flags, env, config)
    assert settings.model == "flag/model"  # flag beats env and config
    assert settings.base_url == "http://env/v1"  # env beats config; a None flag is no flag
    assert settings.api_key == "openai-key"
    assert settings.concurrency == 2  # from config
    both = resolve_backend_settings({}, {"KEVIN_API_KEY": "kevin", "OPENAI_API_KEY": "openai"}, {})
    assert both.api_key == "kevin"


def test_bad_config_value_names_key_and_file(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.kevin]\nconcurrency = "lots"\n')
    config = load_config(tmp_path)
    with pytest.raises(UserInputError) as err:
        resolve_backend_settings({}, {}, config)
    message = str(err.value)
    assert "'concurrency'" in message and str(tmp_path / "pyproject.toml") in message
    assert "\n" not in message


@pytest.mark.parametrize("key, value", [("backend", "llamacpp"), ("max_tokens", 0),
                                        ("temperature", -1), ("stream", "maybe"), ("model", ""),
                                        ("base_url", "localhost:8000/v1")])
def test_bad_values_rejected(key: str, value: object) -> None:
    with pytest.raises(UserInputError, match=key):
        resolve_backend_settings({}, {}, {key: value})


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(UserInputError, match="KEVIN_BACKEND"):
        resolve_backend_settings({}, {"KEVIN_BACKEND": "tgi"}, {})


def test_bad_flag_value_names_the_option() -> None:
    with pytest.raises(UserInputError, match="--tensor-parallel-size"):
        resolve_backend_settings({"tensor_parallel_size": 0}, {}, {})


def test_invalid_toml_is_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "kevin.toml").write_text("model = \n")
    with pytest.raises(UserInputError) as err:
        load_config(tmp_path)
    assert str(tmp_path / "kevin.toml") in str(err.value) and "TOML" in str(err.value)


def test_scripted_needs_a_script() -> None:
    with pytest.raises(UserInputError, match="--script"):
        resolve_backend_settings({"backend": "scripted"}, {}, {})
    settings = resolve_backend_settings({"backend": "scripted"}, {"KEVIN_SCRIPT": "s.json"}, {})
    assert settings.script == "s.json"


def test_string_numbers_from_env_style_values_convert() -> None:
    settings = resolve_backend_settings({"max_model_len": "65536", "stream": "false",
                                         "timeout_s": "30"}, {}, {})
    assert (settings.max_model_len, settings.stream, settings.timeout_s) == (65536, False, 30.0)


def test_evaluation_settings_flags_beat_env_beat_config():
    from kevin_agent.config import resolve_eval_settings

    config = {"policy": "partial", "cluster": "ray://head:10001", "sandbox": "required"}
    assert resolve_eval_settings({}, {}, config) == config
    env = {"KEVIN_POLICY": "strict", "KEVIN_CLUSTER": "auto"}
    assert resolve_eval_settings({"sandbox": "off", "policy": None}, env, config) == {
        "policy": "strict", "cluster": "auto", "sandbox": "off"}


@pytest.mark.parametrize("key, value, message", [
    ("policy", "loose", "strict, partial"), ("sandbox", "maybe", "auto, required, off"),
    ("cluster", "http://head", "ray://"),
])
def test_bad_evaluation_settings_name_the_fix(key, value, message):
    from kevin_agent.config import resolve_eval_settings

    with pytest.raises(UserInputError, match=message):
        resolve_eval_settings({key: value})


@pytest.mark.parametrize("name, text", [
    ("kevin.toml", 'base_ur = "http://gpu:8000/v1"\n'),
    ("pyproject.toml", '[tool.kevin]\nbase_ur = "http://gpu:8000/v1"\n'),
])
def test_unknown_key_is_an_error_naming_the_closest_known_one(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(UserInputError) as err:
        load_config(tmp_path)
    assert err.value.exit_code == 2
    assert str(err.value) == f"{tmp_path / name}: unknown key 'base_ur' in [tool.kevin] (did you mean 'base_url'?)"


def test_unknown_key_far_from_every_known_one_lists_them(tmp_path: Path) -> None:
    (tmp_path / "kevin.toml").write_text('zzzz = 1\n')
    with pytest.raises(UserInputError, match=r"unknown key 'zzzz'.*known keys: accept_dir, api_key, backend"):
        load_config(tmp_path)


def test_keys_of_every_owner_are_known(tmp_path: Path) -> None:
    (tmp_path / "kevin.toml").write_text(
        'base_url = "http://gpu:8000/v1"\npolicy = "partial"\ncluster = "auto"\nsandbox = "off"\n'
        'accept_dir = "kernels"\nrun_hooks = true\nstream = false\n')
    assert load_config(tmp_path)["run_hooks"] is True


def test_cli_stops_on_an_unknown_key_with_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from kevin_agent.cli import main

    (tmp_path / "kevin.toml").write_text('max_token = 100\n')
    (tmp_path / "m.py").write_text(
        "import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
        "def get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n")
    monkeypatch.chdir(tmp_path)
    assert main(["prompt", "m.py::M"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"kevin prompt: {tmp_path / 'kevin.toml'}: unknown key 'max_token' in [tool.kevin] "
                   "(did you mean 'max_tokens'?)"]


def test_the_build_limit_comes_from_the_environment_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from kevin_agent.evaluate.api import EvalSettings
    from kevin_agent.evaluate.build.cache import BuildCache

    monkeypatch.delenv("KEVIN_COMPILE_TIMEOUT_S", raising=False)
    assert EvalSettings().compile_timeout_s == 300.0 and BuildCache(Path("/nonexistent")).timeout_s == 300.0
    monkeypatch.setenv("KEVIN_COMPILE_TIMEOUT_S", "1500")
    assert EvalSettings().compile_timeout_s == 1500.0 and BuildCache(Path("/nonexistent")).timeout_s == 1500.0
    assert EvalSettings(compile_timeout_s=5.0).compile_timeout_s == 5.0  # an explicit limit wins
    for bad in ("soon", "0", "-3", "inf"):
        monkeypatch.setenv("KEVIN_COMPILE_TIMEOUT_S", bad)
        with pytest.raises(UserInputError, match="KEVIN_COMPILE_TIMEOUT_S="):
            EvalSettings()


def test_a_bad_build_limit_in_the_environment_never_breaks_an_import_only_a_command_says_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    env = {**os.environ, "KEVIN_COMPILE_TIMEOUT_S": "abc"}
    modules = ("kevin_agent.runs.service", "kevin_agent.evaluate.evaluator", "kevin_agent.lsp.server",
               "kevin_agent.tui.app", "kevin_agent.commands.eval_cmd", "kevin_agent.evaluate.daemon.server")
    program = "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)"
    imported = subprocess.run([sys.executable, "-c", program, *modules], env=env, capture_output=True, text=True,
                              timeout=300)  # a guard against a hang, not a limit
    assert imported.returncode == 0, imported.stderr[-2000:]
    from kevin_agent.evaluate.api import EvalSettings

    monkeypatch.setenv("KEVIN_COMPILE_TIMEOUT_S", "abc")
    with pytest.raises(UserInputError, match="KEVIN_COMPILE_TIMEOUT_S='abc' is not a number"):
        EvalSettings()


def test_the_suite_runs_with_a_build_limit_a_slow_machine_cannot_hit() -> None:
    import os

    assert float(os.environ["KEVIN_COMPILE_TIMEOUT_S"]) >= 1500  # set by tests/conftest.py
