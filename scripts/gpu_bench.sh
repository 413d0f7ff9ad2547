#!/usr/bin/env bash
# One sitting on a lent GPU machine (issues 37, 73): the wheels its image lacks and the spoken
# prompts, made here by scripts/gpu_prepare.sh and carried (.whl/, .speech/); then `python -m
# bench omni` at Qwen2.5-Omni-7B shapes, the baseline (speech_decode eager, the first piece spoken
# whole, 10 flow-matching steps: eager:0:10) and the change (CUDA graphs, the first audio after one
# DiT block, the steps `python -m bench.fit.ode_steps` chose: cuda_graphs:1:$STEPS) back to back on
# one card, at 1 and 4 sessions, with as many workers as the card holds (~24 GB each, at most 4). Writes bench.log, omni.json and the workers' logs into $OUT (or
# ./gpu-out). About 7 device-minutes after the machine is up (build and save ~0.5, each setting
# ~3); DRY_RUN=1 runs it here on a CPU at depth 1 (the tiny dry run).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ -n "${DRY_RUN:-}" ]; then
  MODEL=${MODEL:-/tmp/q7b-dry}
  .venv/bin/python -m bench omni --model-dir "$MODEL" --build --depth 1 --device cpu --dtype float32 \
    --concurrency 1 --prompts 1 --max-tokens 4 --speech-decode eager:0:10 "static:1:${STEPS:-4}" --out "$OUT" --logs "$OUT/logs" "$@" \
    2>&1 | tee "$OUT/bench.log"
  exit "${PIPESTATUS[0]}"
fi
[ -d .whl ] && [ -d .speech ] || { echo "no .whl/ or .speech/: run scripts/gpu_prepare.sh here and carry both"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader
nproc; df -h /dev/shm /tmp | tail -2
MODEL=/dev/shm/q7b
[ "$(df --output=avail -B1G /dev/shm | tail -1)" -gt 30 ] || MODEL=/tmp/q7b
FITS=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{w=int($1/24576); print (w>4?4:(w<1?1:w))}')
python3 -m bench omni --model-dir "$MODEL" --build --device cuda:0 --speech-dir .speech \
  --concurrency ${CONCURRENCY:-1 4} --prompts ${PROMPTS:-4} --max-tokens ${MAX_TOKENS:-24} \
  --speech-decode ${SPEECH_DECODE:-eager:0:10 cuda_graphs:1:${STEPS:-4}} --workers ${WORKERS:-$FITS} \
  --out "$OUT" --logs "$OUT/logs" "$@" 2>&1 | tee "$OUT/bench.log"
