#!/usr/bin/env bash
# Install everything (first run only) and run the full demo on an embedded local Ray cluster:
# preprocess the bundled sample chats, serve the demo tools and env on Ray Serve, roll out the demo
# prompts with the bundled tiny model on vLLM (CPU), print the summary and where the outputs are.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 TORCH_COMPILE_DISABLE=1
export RAY_USAGE_STATS_ENABLED=0 TOKENIZERS_PARALLELISM=false
exec .venv/bin/twinkle-agentic demo "$@"
