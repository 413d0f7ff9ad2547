#!/usr/bin/env bash
# Installs everything into .venv (scripts/install.sh, skipped when up to date) and starts OmniDuplex:
# the supervisor (launcher/supervisor.py) runs the model workers and the gateway, shows model loading,
# restarts crashed processes and stops everything on Ctrl-C. It prints the URL to open when ready
# (https:// when the gateway serves TLS: see "HTTPS" in docs/operations.md).
# With a GPU backend (qwen_omni, minicpm_o; docs/backends.md) it runs one worker per visible GPU
# (CUDA_VISIBLE_DEVICES, else nvidia-smi), each pinned to its GPU; on a CPU machine nothing changes.
#   ./start_all.sh [--config F] [--workers N] [--port P] [--tls auto|on|off] [--llm-url URL [--llm-model M]]
# --config defaults to config.json; paths are relative to this directory.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/install.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# A later --config in "$@" wins over this default.
exec .venv/bin/python -m launcher --config config.json "$@"
