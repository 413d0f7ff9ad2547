#!/usr/bin/env bash
# Installs everything into .venv and starts OmniDuplex with the embedded CPU pipeline.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/install.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# Gateway and workers arrive with the realtime server; for now: load the pipeline (converting
# the model cache on first run) and hold one spoken round trip as a self-check.
exec .venv/bin/python -m bench.pipeline --runs 1 "$@"
