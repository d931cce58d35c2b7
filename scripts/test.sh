#!/usr/bin/env bash
# Set up a fresh machine and run the whole test suite (README's test command; CI runs this).
# Installs come from the project's own files only: pyproject.toml (+ its dev extra),
# editors/vscode/package-lock.json, and Debian packages for the editor/screenshot tests.
set -euo pipefail
cd "$(dirname "$0")/.."

export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"

# Debian packages: Neovim (headless editor tests), rsvg-convert (TUI screenshots to PNG);
# for the VS Code test (tests/vscode_e2e): Chromium, and what code-server's install needs:
# Kerberos headers (its native module builds) and ripgrep (see below).
need=()
command -v nvim >/dev/null 2>&1 || need+=(neovim)
command -v rsvg-convert >/dev/null 2>&1 || need+=(librsvg2-bin)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v rg >/dev/null 2>&1 || need+=(ripgrep)
dpkg -s libkrb5-dev >/dev/null 2>&1 || need+=(libkrb5-dev)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "scripts/test.sh: please install: ${need[*]} (apt-get install ${need[*]})" >&2
    exit 1
  fi
fi

python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'

# The VS Code extension: compile and lint with its locked dependencies.
if [ -f editors/vscode/package-lock.json ]; then
  (cd editors/vscode && npm ci --no-audit --no-fund --loglevel=error && npm run -s compile && npm run -s lint)
fi

# The VS Code test's code-server and playwright-core, locked in tests/vscode_e2e. code-server's
# postinstall fetches ripgrep from GitHub, which this machine cannot reach: @vscode/ripgrep
# (1.15.11, pinned by code-server) uses a release archive already in its download cache, so
# Debian's rg goes there first. npx in node-pty's install must not stop to ask (npm_config_yes);
# node-gyp builds its native modules against the installed Node's headers (no download).
rg_cache="${TMPDIR:-/tmp}/vscode-ripgrep-cache-1.15.11"
mkdir -p "$rg_cache"
tar czhf "$rg_cache/ripgrep-v13.0.0-10-$(uname -m)-unknown-linux-musl.tar.gz" -C "$(dirname "$(command -v rg)")" rg
(
  cd tests/vscode_e2e
  if [ -f /usr/include/node/node.h ]; then export npm_config_nodedir="${npm_config_nodedir:-/usr}"; fi
  npm_config_yes=true npm ci --unsafe-perm --no-audit --no-fund --loglevel=error
)

# CPU checks first (they catch rot in code no CPU test runs, tests/gpu included): ruff over the
# whole tree, then mypy over kevin_agent, lsp, tui, tests and bench ([tool.mypy] in pyproject.toml;
# scripts/typecheck.py maps lsp/ and tui/ to kevin_agent.lsp / kevin_agent.tui). Either failing
# fails the run before any test starts.
.venv/bin/python -m ruff check .
.venv/bin/python scripts/typecheck.py

exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
