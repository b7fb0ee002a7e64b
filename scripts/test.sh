#!/usr/bin/env bash
# Install everything (first run only) and run the whole test suite; prints pytest's summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 TORCH_COMPILE_DISABLE=1
export RAY_USAGE_STATS_ENABLED=0 TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "$@"
