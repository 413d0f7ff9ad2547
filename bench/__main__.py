"""``python -m bench <what>``: one entry point for every benchmark.

    python -m bench serve       # serving sweep: text and spoken prompts at concurrency 1, 2, 4
    python -m bench relay       # latency the gateway adds per relayed event, vs straight to a worker
    python -m bench throughput  # relay throughput against a synthetic worker at line rate
    python -m bench capacity    # 1,000 queued clients; dispatch latency (--gateways 2: across gateways)
    python -m bench pipeline    # the embedded models in-process (TTFT, TTFP, V2V, RTF)
    python -m bench recording   # V2V with recording on vs off
    python -m bench rest        # OpenAI REST chat completions with audio at concurrency 1, 2, 4
    python -m bench tools       # function calling via the realtime API: right decisions, valid arguments, latency
    python -m bench turns       # turn-taking: spoken V2V and mid-sentence cut-ins per turn-detection mode
    python -m bench answers     # answer quality via REST: simple questions answered right and short
    python -m bench duplex      # full duplex: pause takeover, turn latency, interruptions, backchannels (Full-Duplex-Bench style)
    python -m bench duplex --room --set dev   # the same in a room: the mic hears the loudspeaker (echo) and noise
    python -m bench calls       # WebRTC calls: V2V against WebSocket, gateway CPU per call, 20 calls without underruns
    python -m bench heard       # questions heard as spoken: an Agents SDK call in Chromium vs a WebSocket session
    python -m bench tracing     # OpenTelemetry tracing on vs off: the worker's turn hook, a typed turn's e2e
    python -m bench omni        # qwen_omni at Qwen2.5-Omni-7B shapes (random weights) on a GPU: TTFP, RTF, E2E, memory
    python -m bench resume      # a dropped connection brought back with its resume token vs a new session
    python -m bench fuzz        # hostile clients of both dialects and the call routes for --seconds (default 600); --seed replays

Each prints a markdown table; ``--json`` prints one JSON object instead; ``--out DIR`` also
writes JSON (and PNG plots where there are any) into DIR.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

COMMANDS = {
    "serve": "bench.serving",
    "relay": "bench.relay",
    "throughput": "bench.throughput",
    "capacity": "bench.capacity",
    "tools": "bench.tools",
    "turns": "bench.turns",
    "answers": "bench.answers",
    "calls": "bench.calls",
    "heard": "bench.heard",
    "duplex": "bench.duplex",
    "tracing": "bench.tracing",
    "fuzz": "bench.fuzz",
    "resume": "bench.resume",
}
DELEGATED = {"pipeline": "bench.pipeline", "recording": "bench.recording", "rest": "bench.rest", "omni": "bench.omni_gpu"}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in DELEGATED:
        sys.argv = [f"python -m bench {argv[0]}", *argv[1:]]
        module = importlib.import_module(DELEGATED[argv[0]])
        (getattr(module, "cli", None) or module.main)()  # pipeline's main() is its async runner
        return
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=[*COMMANDS, *DELEGATED])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=Path, help="also write results (and plots) into this directory")
    parser.add_argument("--clients", type=int, default=1000, help="capacity: queued clients")
    parser.add_argument("--hold", type=float, default=10.0,
                        help="capacity: seconds to hold them; calls: seconds each load level is measured")
    parser.add_argument("--gateways", type=int, default=1,
                        help="capacity, relay, resume: gateways sharing one queue through a private redis-server "
                             "(2+ also measures one gateway in the same run, side by side)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4], help="serve: levels")
    parser.add_argument("--prompts", type=int, default=8,
                        help="serve: prompts per kind and level; calls: spoken prompts per transport and run; heard: "
                             "questions (dev parts only; each asked --asks times per transport a run); "
                             "tracing: typed turns per run; resume: drops per run")
    parser.add_argument("--voices", type=int, default=1,
                        help="heard: voices, round-robin over the questions (the pipeline's Piper voice, then "
                             "espeak-ng dev voices; up to 6)")
    parser.add_argument("--asks", type=int, default=2, help="heard: times each question is asked per transport a run")
    parser.add_argument("--keep", type=Path, help="heard: record the sessions and keep them (input audio) in this directory")
    parser.add_argument("--workers", type=int, default=1, help="serve: workers to start")
    parser.add_argument("--events", type=int, default=400, help="relay: probes per direction")
    parser.add_argument("--seconds", type=float, help="throughput: seconds of streaming (default 5); calls: seconds "
                                                      "of transport probes (default 10); fuzz: seconds of fuzzing "
                                                      "(default 600)")
    parser.add_argument("--seed", type=int, help="fuzz: the run's seed (printed by every run), to replay it")
    parser.add_argument("--modes", nargs="+", help="turns, duplex: turn-detection modes (default: all)")
    parser.add_argument("--kinds", nargs="+", choices=["complete", "paused", "backchannel", "interruption", "cutin"],
                        help="duplex: which kinds of trial (default: all five)")
    parser.add_argument("--transport", choices=["websocket", "webrtc"], default="websocket",
                        help="duplex: the trials over a long reply over a WebSocket session or a WebRTC call "
                             "(measured on the track)")
    parser.add_argument("--limit", type=int, help="turns, duplex: the first N items of each kind (duplex --room: at "
                                                  "most N trials a condition); answers: the first N questions")
    parser.add_argument("--room", action="store_true",
                        help="duplex: the room's plan instead of the clean one: a microphone that also hears the "
                             "loudspeaker (echo) and noise (bench/duplex/room_trials.py); dev parts only")
    parser.add_argument("--echo-cancellation", choices=["server", "off"], default="server",
                        help="duplex --room: the server's echo canceller (server, its default: nothing sent) or "
                             "off (echo_cancellation null: the baseline)")
    parser.add_argument("--noise-reduction", choices=["none", "near_field", "far_field"], default="none",
                        help="duplex --room: session.audio.input.noise_reduction (none, the default: nothing sent)")
    parser.add_argument("--conditions", nargs="+", choices=["echo", "cutin", "backchannel", "noise", "spoken"],
                        help="duplex --room: which groups of conditions (default: all five)")
    parser.add_argument("--set", choices=["eval", "dev", "dev2", "fresh"], default="eval",
                        help="answers, tools, duplex: which part of the set (duplex dev2: issue 34's eval, spent and "
                             "tuned on since; fresh: dev2's phrases in issue 47's fresh voices; both dev now). A "
                             "duplex eval run is logged in docs/eval-runs.md")
    parser.add_argument("--purpose", choices=["figure", "diagnosis"], default="figure",
                        help="duplex --set eval: why the held-out part runs, logged (a diagnosis makes its figures "
                             "eval-informed)")
    parser.add_argument("--runs", type=int,
                        help="tools, turns, calls, duplex, tracing, answers, heard (default 3): repeat on one stack, report the median and spread")
    parser.add_argument("--parts", nargs="+", choices=["v2v", "transport", "load", "sessions", "listening", "room"],
                        help="calls: which parts (default: v2v, transport, load; room: the worker's echo canceller "
                             "and noise suppressor per session, in process)")
    parser.add_argument("--calls", type=int, nargs="+", help="calls: concurrent calls per load level (default 1 5 10 20)")
    parser.add_argument("--llm-url", help="answers: also run the cascade with this OpenAI-compatible LLM")
    parser.add_argument("--llm-model", help="answers: the model name at --llm-url")
    parser.add_argument("--llm-api-key", help="answers: the API key for --llm-url")
    parser.add_argument("--temperature", type=float, help="answers: sampling temperature (default: the server's)")
    parser.add_argument("--max-tokens", type=int, help="answers: reply token budget (default: the server's)")
    parser.add_argument("--verbose", action="store_true", help="answers: list every answer, not only wrong/long")
    args = parser.parse_args(argv)
    module = importlib.import_module(COMMANDS[args.what])
    result = module.run_cli(args) if hasattr(module, "run_cli") else module.run(args.clients, args.hold)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.what}.json").write_text(json.dumps(result, indent=1))
        if hasattr(module, "plot"):
            module.plot(result, args.out)
    print(json.dumps(result) if args.json else module.report(result))


if __name__ == "__main__":
    main()
