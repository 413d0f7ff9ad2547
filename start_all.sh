#!/usr/bin/env bash
# Installs everything into .venv (scripts/install.sh, skipped when up to date) and starts OmniDuplex:
# the supervisor (launcher/supervisor.py) runs the model workers and the gateway, shows model loading,
# restarts crashed processes and stops everything on Ctrl-C. It prints the URL to open when ready
# (https:// when the gateway serves TLS: see "HTTPS" in docs/operations.md).
# With a GPU backend (qwen_omni, minicpm_o; docs/backends.md) it runs one worker per visible GPU
# (CUDA_VISIBLE_DEVICES, else nvidia-smi), each pinned to its GPU; on a CPU machine nothing changes.
#   ./start_all.sh [--config F] [--workers N] [--port P] [--tls auto|on|off] [--llm-url URL [--llm-model M]]
#                  [--redis URL|local] [--gateway-only]
# --redis shares the queue and the workers with other gateways through that Redis; "local" runs a
# private redis-server on 127.0.0.1:cluster.local_port (installed here when missing and running as
# root), or reuses the one another ./start_all.sh on this host started. --gateway-only starts no
# local workers: e.g. a second gateway, ./start_all.sh --gateway-only --redis local --port 8007.
# --config defaults to config.json; paths are relative to this directory.
set -euo pipefail
cd "$(dirname "$0")"
install_args=()
prev=
for arg in "$@"; do
  if { [ "$prev" = --redis ] && [ "$arg" = local ]; } || [ "$arg" = --redis=local ]; then
    command -v redis-server >/dev/null || install_args=(--with-redis)  # else the launcher says how
  fi
  prev=$arg
done
bash scripts/install.sh ${install_args[@]+"${install_args[@]}"}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# A later --config in "$@" wins over this default.
exec .venv/bin/python -m launcher --config config.json "$@"
