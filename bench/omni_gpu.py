"""``python -m bench omni``: the ``qwen_omni`` backend at a real model's shapes, timed through a
worker and the gateway (made for a GPU; ``--depth 1 --device cpu`` is its dry run on a CPU).

    python -m bench omni --model-dir /dev/shm/q7b --build [--depth N] [--device cuda] \\
        [--concurrency 1 4] [--prompts 4] [--max-tokens 24] [--speech-dir DIR] [--out DIR] \\
        [--speech-decode eager:0:10 cuda_graphs:1:10] [--workers N]

Weights cannot be fetched here, and timing does not depend on their values: ``--build`` makes a
Qwen2.5-Omni-7B-shaped model with random weights (``devtools/omni_models.py``) on the device and
saves it; then a real worker loads it with the backend's own loader and the gateway queues the
clients onto it (one worker per GPU: at concurrency 4 the clients wait in the FIFO). Random
weights never stop on their own, so every reply is ``--max-tokens`` long; the Talker speaks up to
its per-token cap of codec frames. Requests and metrics are the serving benchmark's
(``bench/serving.py``): text prompts (clock at ``response.create``) and spoken ones streamed in
real time with server VAD (clock at the last voiced sample: TTFP is voice-to-voice).

Also reported: GPU memory per worker (the worker's ``/health``: allocated after loading, after the
warm-up and after every level, so memory a session leaves behind shows), the model's parameter
counts, load time, and the first audio piece's split between Talker and vocoder (worker log).

``--speech-decode`` runs the whole sequence once per setting, ``decode[:blocks[:steps]]``: the
backend's ``speech_decode``, ``first_audio_blocks`` and ``token2wav_steps`` (issue 73: transformers'
eager Talker and vocoder with the first piece spoken whole at 10 steps, ``eager:0:10``, then the
static cache and CUDA graphs with the first audio let out early at the steps ``bench.fit.ode_steps``
chose), one after the other on the same card, in one table. ``--workers N`` puts N workers on the card (each
its own model): the levels up to N are N sessions at once, and the report gives the sessions per
card at RTF p50 <= 0.5.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import time
import wave
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.launch import Launched, raise_fd_limit
from bench.serving import SPOKEN_PROMPTS, TEXT_PROMPTS, level, summarise

RATE = 24000
RTF_GOAL = 0.5  # issue 73: real time with room to spare (no stall in a 30 s reply)
FIRST_PIECE = re.compile(r"first audio piece: (\d+) text tokens, (\d+) codes; talker (\d+) ms, vocoder (\d+) ms")


def load_speech(speech_dir: Path | None) -> dict[str, np.ndarray]:
    """The spoken prompts: 24 kHz PCM16 WAVs from ``speech_dir`` (``--save-speech`` writes them),
    else made with the pipeline's TTS (Piper) here."""
    if speech_dir is not None and speech_dir.is_dir():
        out = {}
        for i, prompt in enumerate(SPOKEN_PROMPTS):
            with wave.open(str(speech_dir / f"prompt{i}.wav")) as w:
                assert w.getframerate() == RATE and w.getsampwidth() == 2, "24 kHz PCM16 WAVs expected"
                out[prompt] = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        return out
    from core.cascade.tts import PiperTts

    tts = PiperTts()
    return {p: np.frombuffer(b"".join(tts.synthesize(p, deterministic=True)), dtype="<i2") for p in SPOKEN_PROMPTS}


def save_speech(speech_dir: Path) -> None:
    speech_dir.mkdir(parents=True, exist_ok=True)
    for i, (_, pcm) in enumerate(load_speech(None).items()):
        with wave.open(str(speech_dir / f"prompt{i}.wav"), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(pcm.tobytes())


def backend_options(args) -> dict[str, Any]:
    return {"model_path": str(args.model_dir), "device": args.device, "dtype": args.dtype, "seed": 0,
            "talker_sample": False,  # greedy codec tokens: random weights can make a sampler's probabilities inf
            "first_chunk_words": args.first_chunk_words}


def worker_health(launched: Launched) -> dict[str, Any]:
    return httpx.get(f"{launched.worker_url(0)}/health", headers=launched.worker_headers, timeout=10).json()


def first_pieces(log: str) -> dict[str, Any]:
    rows = [tuple(map(int, m.groups())) for m in FIRST_PIECE.finditer(log)]
    if not rows:
        return {}
    a = np.asarray(rows, dtype=float)
    return {"n": len(rows), "text_tokens_median": float(np.median(a[:, 0])), "codes_median": float(np.median(a[:, 1])),
            "talker_ms_median": float(np.median(a[:, 2])), "vocoder_ms_median": float(np.median(a[:, 3]))}


def run(args) -> dict[str, Any]:
    raise_fd_limit()
    result: dict[str, Any] = {"device": args.device, "dtype": args.dtype, "max_output_tokens": args.max_tokens,
                              "prompts_per_kind": args.prompts, "workers": args.workers, "runs": {}}
    try:
        import torch
        import transformers

        result["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
        if args.device.startswith("cuda"):
            result["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    if args.build:
        from devtools.omni_models import build_qwen2_5_omni_shapes

        print(f"building the model in {args.model_dir} ...", flush=True)
        result["build"] = build_qwen2_5_omni_shapes(args.model_dir, device=args.device, dtype=args.dtype,
                                                    depth=args.depth)
        print(json.dumps(result["build"]), flush=True)
    elif (args.model_dir / "shapes.json").is_file():
        result["build"] = json.loads((args.model_dir / "shapes.json").read_text())
    speech = load_speech(args.speech_dir)
    for setting in args.speech_decode:  # baseline and change back to back, on one machine
        print(f"--- speech_decode {setting}", flush=True)
        result["runs"][setting] = run_one(args, setting, speech)
    return result


def speech_setting(setting: str) -> dict[str, Any]:
    """``decode[:blocks[:steps]]`` -> the backend's options for it."""
    decode, *rest = setting.split(":")
    if decode not in ("eager", "static", "cuda_graphs") or len(rest) > 2 or not all(x.isdigit() for x in rest):
        raise argparse.ArgumentTypeError(f"{setting!r}: expected eager|static|cuda_graphs[:first_audio_blocks"
                                         "[:token2wav_steps]], e.g. cuda_graphs:1:10")
    options: dict[str, Any] = {"speech_decode": decode}
    for name, value in zip(("first_audio_blocks", "token2wav_steps"), rest):
        options[name] = int(value)
    return options


def run_one(args, setting: str, speech: dict[str, np.ndarray]) -> dict[str, Any]:
    """One worker set (``args.workers`` on the one card) with one speech setting: the warm-up,
    then every concurrency level, text and spoken."""
    out: dict[str, Any] = {"levels": [], "memory": {}, "options": speech_setting(setting)}
    logs = args.logs / setting.replace(":", "_") if args.logs else None
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-omni-") as tmp:
        with Launched(Path(tmp), workers=args.workers, recording={"enabled": False},
                      backend={"name": "qwen_omni", "options": backend_options(args) | speech_setting(setting)},
                      queue={"capacity": 100, "max_wait_s": 3600},
                      auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as launched:
            t0 = time.monotonic()
            try:
                launched.wait_ready(timeout=args.load_timeout)
            except RuntimeError:
                print(launched.log("worker0")[-4000:], flush=True)
                if logs:
                    logs.mkdir(parents=True, exist_ok=True)
                    (logs / "worker0.log").write_text(launched.log("worker0")[-2_000_000:])
                raise
            out["load_s"] = round(time.monotonic() - t0, 1)
            out["memory"]["loaded"] = worker_health(launched).get("gpu")
            print(f"{args.workers} worker(s) ready in {out['load_s']} s; gpu {out['memory']['loaded']}", flush=True)
            url = launched.ws_url + "?model=omniduplex-qwen_omni&record=false&app=bench&extensions=all"
            warm = [("text", TEXT_PROMPTS[0], None), ("spoken", SPOKEN_PROMPTS[0], speech[SPOKEN_PROMPTS[0]])]
            rows = asyncio.run(level(url, min(args.workers, 2), warm, max_tokens=args.max_tokens))
            out["warm_up"] = [{k: r.get(k) for k in ("kind", "ttfp_ms", "e2e_ms", "error")} for r in rows]
            out["memory"]["after_warm_up"] = worker_health(launched).get("gpu")
            print(f"warm-up: {out['warm_up']}", flush=True)
            for c in args.concurrency:
                for kind in ("text", "spoken"):
                    n = max(args.prompts, c)
                    if kind == "text":
                        jobs = [("text", TEXT_PROMPTS[i % len(TEXT_PROMPTS)], None) for i in range(n)]
                    else:
                        jobs = [("spoken", p, speech[p]) for p in (SPOKEN_PROMPTS * n)[:n]]
                    t_level = time.monotonic()
                    rows = asyncio.run(level(url, c, jobs, max_tokens=args.max_tokens))
                    lv = {"concurrency": c, "kind": kind, **summarise(rows), "wall_s": round(time.monotonic() - t_level, 1),
                          "raw": rows}
                    out["levels"].append(lv)
                    out["memory"][f"after_c{c}_{kind}"] = worker_health(launched).get("gpu")
                    print(level_line(lv), flush=True)
            worker_logs = "\n".join(launched.log(f"worker{i}") for i in range(args.workers))
            out["first_piece"] = first_pieces(worker_logs)
            out["nvidia_smi"] = nvidia_smi_apps(launched.pid("worker0"))
            if logs:
                logs.mkdir(parents=True, exist_ok=True)
                for name in [f"worker{i}" for i in range(args.workers)] + ["gateway"]:
                    (logs / f"{name}.log").write_text(launched.log(name)[-2_000_000:])
    return out


def nvidia_smi_apps(worker_pid: int) -> dict[str, Any] | None:
    """What the driver says the worker process holds (PyTorch's pools plus the CUDA context)."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=20).stdout
    apps = {int(pid): int(mib) for pid, mib in (line.split(",") for line in out.strip().splitlines() if "," in line)}
    return {"worker_mib": apps.get(worker_pid), "all_mib": apps}


def level_line(lv: dict[str, Any]) -> str:
    def p(key: str) -> str:
        s = lv[key]
        return "-" if s["median"] is None else f"{s['median']:.0f}/{s['p90']:.0f}"

    rtf = lv["rtf"]
    rtf_text = "-" if rtf["median"] is None else f"{rtf['median']:.2f}/{rtf['p90']:.2f}"
    return (f"c={lv['concurrency']} {lv['kind']}: TTFP {p('ttfp_ms')} ms, E2E {p('e2e_ms')} ms, TTFT {p('ttft_ms')} ms, "
            f"RTF {rtf_text}, "
            f"queue {p('queue_wait_ms')} ms, underruns {lv['underruns']}, errors {lv['errors']}")


def report(r: dict[str, Any]) -> str:
    build = r.get("build") or {}
    params = build.get("parameters") or {}
    loads = ", ".join(f"{decode} {run.get('load_s')} s" for decode, run in r["runs"].items())
    lines = [f"Device: {r.get('gpu') or r['device']} ({r['dtype']}); versions {r.get('versions')}; "
             f"model: {build.get('model', '?')}, depth {build.get('depth') or 'full'}, "
             f"{params.get('total', 0) / 1e9:.2f} B parameters "
             f"({', '.join(f'{k} {v / 1e9:.2f} B' for k, v in params.items() if k != 'total')}); "
             f"{r['workers']} worker(s) on the card; max_output_tokens {r['max_output_tokens']}; "
             f"load {loads}.", "",
             "| Speech decode | Input | Concurrency | Requests | TTFP p50 / p90 (ms) | E2E p50 / p90 (ms) | "
             "TTFT p50 (ms) | RTF p50 / p90 | Queue wait p50 (ms) | Underruns | Errors |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def f(s: dict, key: str, digits: int = 0) -> str:
        v = s.get(key)
        return "-" if v is None else f"{v:.{digits}f}"

    for decode, run in r["runs"].items():
        for lv in run["levels"]:
            inp = "text" if lv["kind"] == "text" else "speech (TTFP = V2V)"
            lines.append(f"| {decode} | {inp} | {lv['concurrency']} | {lv['requests']} | {f(lv['ttfp_ms'], 'median')} / "
                         f"{f(lv['ttfp_ms'], 'p90')} | {f(lv['e2e_ms'], 'median')} / {f(lv['e2e_ms'], 'p90')} | "
                         f"{f(lv['ttft_ms'], 'median')} | {f(lv['rtf'], 'median', 2)} / {f(lv['rtf'], 'p90', 2)} | "
                         f"{f(lv['queue_wait_ms'], 'median')} | {lv['underruns']} | {lv['errors']} |")
    for decode, run in r["runs"].items():
        fast = [lv["concurrency"] for lv in run["levels"]
                if lv["rtf"].get("median") is not None and lv["rtf"]["median"] <= RTF_GOAL]
        lines.append(f"\n{decode}: sessions per card at RTF p50 <= {RTF_GOAL}: "
                     f"{min(max(fast), r['workers']) if fast else 0} (of the levels run, with {r['workers']} worker(s))")
        lines.append("GPU memory (MiB, worker0's PyTorch: allocated / reserved / peak):")
        for when, m in run["memory"].items():
            lines.append(f"- {when}: " + ("-" if not m else f"{m['allocated_mib']} / {m['reserved_mib']} / "
                                                 f"{m['peak_allocated_mib']}"))
        if run.get("nvidia_smi"):
            lines.append(f"- nvidia-smi, worker0's process: {run['nvidia_smi']['worker_mib']} MiB")
        if run.get("first_piece"):
            fp = run["first_piece"]
            lines.append(f"First audio piece (median of {fp['n']}): {fp['text_tokens_median']:.0f} text tokens, "
                         f"{fp['codes_median']:.0f} codec frames; Talker {fp['talker_ms_median']:.0f} ms, "
                         f"vocoder {fp['vocoder_ms_median']:.0f} ms")
    return "\n".join(lines)


def _setting(text: str) -> str:
    speech_setting(text)  # refused here, with its reason, rather than after the model is built
    return text


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench omni", description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, help="the model directory (made with --build)")
    parser.add_argument("--build", action="store_true", help="build the random-weight model there first")
    parser.add_argument("--depth", type=int, help="layers per stack (a dry run; default: the real depth)")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--prompts", type=int, default=4, help="prompts per kind and level (at least the concurrency)")
    parser.add_argument("--max-tokens", type=int, default=24, help="reply length in text tokens")
    parser.add_argument("--first-chunk-words", type=int, default=2, help="the backend's first speakable piece")
    parser.add_argument("--speech-dir", type=Path, help="spoken prompts as 24 kHz WAVs (default: Piper here)")
    parser.add_argument("--save-speech", type=Path, help="only write the spoken prompts as WAVs there, then stop")
    parser.add_argument("--speech-decode", nargs="+", default=["eager"], type=_setting,
                        help="speech settings decode[:first_audio_blocks[:token2wav_steps]], each run in turn "
                             "(baseline, then the change), e.g. eager:0:10 cuda_graphs:1:10")
    parser.add_argument("--workers", type=int, default=1, help="workers on the one card (sessions per card)")
    parser.add_argument("--load-timeout", type=float, default=900.0)
    parser.add_argument("--logs", type=Path, help="keep the worker's and the gateway's logs there")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.save_speech:
        save_speech(args.save_speech)
        return
    if args.model_dir is None:
        parser.error("--model-dir is required (with --build to make the model there)")
    result = run(args)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "omni.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result) if args.json else report(result))


if __name__ == "__main__":
    cli()
