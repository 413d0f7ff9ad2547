#!/usr/bin/env bash
# One sitting on a lent GPU machine (issue 37): the wheels its image lacks (carried in .whl/, made
# with `pip download` as docs/benchmarks-history.md, "On a GPU", says), then `python -m bench omni`
# at Qwen2.5-Omni-7B shapes. Writes bench.log, omni.json and the worker's log into $OUT (or ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader
nproc; df -h /dev/shm /tmp | tail -2
MODEL=/dev/shm/q7b
[ "$(df --output=avail -B1G /dev/shm | tail -1)" -gt 30 ] || MODEL=/tmp/q7b
python3 -m bench omni --model-dir "$MODEL" --build --device cuda:0 --speech-dir .speech \
  --concurrency ${CONCURRENCY:-1 4} --prompts ${PROMPTS:-4} --max-tokens ${MAX_TOKENS:-24} \
  --out "$OUT" --logs "$OUT/logs" "$@" 2>&1 | tee "$OUT/bench.log"
