#!/usr/bin/env bash
# Here, before a GPU sitting (issue 73): what the GPU machine's image lacks, made once on this
# machine and carried there (run's carry: [".whl", ".speech"], ~43 MB of the 64 MiB allowed):
# - .whl/: wheels for its Python (GPU_PYTHON, 3.12 in the last sitting) at the versions tested
#   here (read from this .venv): the worker and the gateway's web stack, transformers, the room's
#   echo canceller (livekit, pyaec); its own torch, numpy and the hub's small packages it has;
# - .speech/: the spoken prompts as 24 kHz WAVs (Piper here), so nothing is synthesised there.
# Then there: bash scripts/gpu_bench.sh (docs/benchmarks.md, "On a GPU").
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${GPU_PYTHON:-3.12}
PACKAGES="fastapi starlette pydantic pydantic_core annotated-types annotated-doc typing-inspection typing_extensions
opentelemetry-api uvicorn websockets python-multipart soxr silero-vad transformers tokenizers livekit aiofiles
types-protobuf protobuf pyaec"
pins=$(.venv/bin/python - $PACKAGES <<'PY'
import importlib.metadata as m, sys
print(" ".join(f"{name}=={m.version(name)}" for name in sys.argv[1:]))
PY
)
rm -rf .whl && mkdir -p .whl
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl $pins
HF_HUB_OFFLINE=1 .venv/bin/python -m bench omni --save-speech .speech
du -sh .whl .speech
