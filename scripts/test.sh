#!/usr/bin/env bash
# Set up a fresh machine and run the whole test suite (README's test command; CI runs this).
# Installs come from the project's own files only: pyproject.toml (+ its dev extra),
# editors/vscode/package-lock.json, and Debian packages for the editor/screenshot tests.
set -euo pipefail
cd "$(dirname "$0")/.."

export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"

# Debian packages: Neovim (headless editor tests), rsvg-convert (TUI screenshots to PNG).
need=()
command -v nvim >/dev/null 2>&1 || need+=(neovim)
command -v rsvg-convert >/dev/null 2>&1 || need+=(librsvg2-bin)
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

exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
