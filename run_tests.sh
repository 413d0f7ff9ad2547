#!/usr/bin/env bash
# Installs everything into .venv, then runs the test suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/install.sh --with-browser
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python -m pytest -q "$@"
