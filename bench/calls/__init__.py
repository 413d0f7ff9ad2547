"""WebRTC calls (issue 33): voice-to-voice against WebSocket in one run, gateway CPU per live call,
and many calls relayed at once without an audio underrun.

    python -m bench calls                          # all three parts: V2V and transport x3 runs, 0/1/5/10/20 calls
    python -m bench calls --parts v2v --prompts 8 --runs 3
    python -m bench calls --parts transport --seconds 10 --runs 3
    python -m bench calls --parts load --calls 1 5 10 20 --hold 10
    python -m bench calls --parts transport load --seconds 2 --calls 2 --hold 1   # the e2e test's size
    python -m bench calls --parts room --seconds 20 --runs 3   # the worker's echo canceller per session
    python -m bench calls --parts sessions --calls 1 20 --hold 10   # the load part with WebSocket sessions
    python -m bench calls --parts listening --hold 10 --runs 3      # one WebSocket session, gateway + real worker

**V2V** (a real gateway and one cascade worker): the same spoken prompts (the pipeline's Piper
voice, as ``bench serve``) streamed in real time, (a) over the WebSocket as 40 ms PCM16
``input_audio_buffer.append`` events, as our pages send them, and (b) over a WebRTC call from an
``aiortc`` peer (this module's own client, a browser stand-in): a microphone track of 20 ms frames,
Opus-encoded by aiortc, JSON on the ``oai-events`` data channel. One fresh session or call per
prompt, server VAD (500 ms of silence ends the turn), ``max_output_tokens`` 48; the transports
alternate prompt by prompt (which goes first alternates too), so load drifts hit both alike.

The clock: both clients send audio as a microphone captures it, each chunk when its last sample
has been "spoken" (chunk n of d seconds leaves at t0 + (n+1)d), and V2V runs from the instant the
last voiced sample was spoken (t0 + its index / 24 kHz) to the first reply audio the client can
play: on the WebSocket the first ``response.output_audio.delta``; on the call the first decoded
frame of reply audio out of the inbound track. Reply frames are told from the gateway's idle
frames exactly: the gateway sends a fixed 3-byte Opus silence frame while nothing plays, so an RTP
packet with any other payload is reply audio, and a decoded frame carries its packet's RTP
timestamp. What the call's figure includes and the WebSocket's does not:

- packetisation: 20 ms frames (the WebSocket's 40 ms chunks cost more here);
- the gateway's receiver: aiortc's audio jitter buffer releases a frame when the 4th after it has
  arrived (80 ms); then Opus decoding, resampling and 40 ms appends;
- on the way out: Opus encoding at the gateway, the track's 20 ms tick, and the bench client's own
  receiver: aiortc's jitter buffer (80 ms again) and decoder. A browser's adaptive jitter buffer
  on a clean network holds less; so the client-side jitter buffer is shown apart: "wire" is the
  arrival of the first reply packet (before any jitter buffer), "track" the decoded frame.

The legs are split with events both transports carry: ``input_audio_buffer.speech_stopped``
(input: how late the worker heard the silence), ``response.created``, and on the call
``output_audio_buffer.started`` (the gateway's track took the first reply frame).

The worker's own V2V (``session.metrics``: speech stopped -> first audio) is kept per turn, and
"V2V less the worker's own V2V" takes the model's time out of each turn: on a loaded machine the
model's time swings by seconds and hides the transports' difference.

**Transport** (a real gateway and ``bench/synthetic_worker.py --probe``, no model): a WebSocket
session and a call at once, each microphone sending a loud 100 ms burst every 0.49 s; the worker
answers each burst's onset with the time its chunk arrived, and every 0.5 s sends a one-delta
reply with the time it was sent (one monotonic clock on one machine). One-way latency in (a sample
spoken -> its chunk at the worker) and out (the delta -> the first reply packet, and the decoded
frame) per transport; their sum is what a turn costs each transport, without the model.

**Load** (a real gateway and ``bench/synthetic_worker.py --paced``, a test double that streams
one endless reply per session in real time, so no model competes for the CPU): at each level K,
K calls at once, each sending a continuous Opus microphone track (pre-encoded speech-like tone:
the gateway decodes, resamples and relays it) and receiving reply audio (the gateway decodes the
deltas' base64 and Opus-encodes them). After the calls are up and playing, the gateway process's
CPU time (``psutil``, all threads; the event loop's thread apart) over ``--hold`` seconds, while a
separate process times ``GET /health`` every 100 ms (the loop's responsiveness); a level of 0
calls first gives the idle figures. Underruns as in ``bench serve`` (a player that starts at the
first reply frame and plays in real time; a frame more than 100 ms late is one), counted on every
call over the window (steady state: not while the other calls connect), with "dry" frames (idle
frames in the middle of the reply: the gateway had nothing queued at a tick) beside them, and the
same rule on the reply packets' arrival ("on the wire", before the client's jitter buffer).

The bench's own clients and the synthetic worker run on the same cores as the gateway; their CPU
is printed next to the gateway's. The load average is printed at the start and end of each part.

**Sessions** (as the load part, ``--calls`` giving the levels): K WebSocket sessions in place of the
calls, each sending 40 ms ``input_audio_buffer.append`` events of the same speech-like tone in real
time (encoded once, before the level) and reading the endless reply's deltas; the gateway's CPU
per session (it relays the JSON untouched both ways) and underruns on the deltas' arrival.

**Listening** (``listening.py``): one WebSocket session's standing cost to the gateway and a real
worker together while the user is quiet, per run a fresh session, the idle processes taken off.

**Room** (in process, no server; ``room_cost.py``): the worker's echo canceller and noise
suppressor per WebSocket session (on by default there; a call leaves the echo to the browser), in
% of a core, with an echoing and a clean microphone.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from bench.calls.common import CPU_GOAL_PCT, MANY_CALLS, UNDERRUN_GOAL, V2V_GOAL_MS, loadavg
from bench.calls.listening import part_listening
from bench.calls.load import part_load
from bench.calls.room_cost import part_room
from bench.calls.transport import part_transport
from bench.calls.v2v import part_v2v
from bench.launch import raise_fd_limit
from bench.stats import goal_mark


def run_cli(args) -> dict[str, Any]:
    raise_fd_limit()
    parts = getattr(args, "parts", None) or ["v2v", "transport", "load"]
    runs = max(1, getattr(args, "runs", None) or 3)
    levels = sorted(set(getattr(args, "calls", None) or [1, 5, 10, MANY_CALLS]))

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    result: dict[str, Any] = {"cpus": os.cpu_count(), "loadavg_start": loadavg()}
    log(f"load average {result['loadavg_start']} on {os.cpu_count()} CPUs")
    if "v2v" in parts:
        result["v2v"] = part_v2v(args.prompts, runs, log)
    if "transport" in parts:
        result["transport"] = part_transport(max(2.0, getattr(args, "seconds", None) or 10.0), runs, log)
    if "load" in parts:
        result["load"] = part_load(levels, args.hold, log)
    if "sessions" in parts:
        result["sessions"] = part_load(levels, args.hold, log, transport="websocket")
    if "listening" in parts:
        result["listening"] = part_listening(max(2.0, args.hold), runs, log)
    if "room" in parts:
        result["room"] = part_room(max(5.0, getattr(args, "seconds", None) or 20.0), runs, log)
    result["loadavg_end"] = loadavg()
    result["goals"] = goals(result)
    return result


def goals(r: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "v2v" in r:
        d = r["v2v"]["median"]["diff_p50_ms"]["median"]
        out["v2v"] = {"value": d, "mark": goal_mark(d, V2V_GOAL_MS, f"WebRTC p50 - WebSocket p50 <= {V2V_GOAL_MS:g} ms")}
    if "transport" in r:
        turn, wire = (r["transport"]["added_p50_ms"][k]["median"] for k in ("turn", "turn_wire"))
        out["transport"] = {"value": turn, "mark": goal_mark(turn, V2V_GOAL_MS, f"a turn <= +{V2V_GOAL_MS:g} ms"),
                            "wire": wire, "wire_mark": goal_mark(wire, V2V_GOAL_MS, f"at the wire <= +{V2V_GOAL_MS:g} ms")}
    if "load" in r:
        levels = r["load"]["levels"][1:]
        worst = max((lv["per_call_pct"] for lv in levels), default=None)
        out["cpu"] = {"value": worst, "mark": goal_mark(worst, CPU_GOAL_PCT, f"<= {CPU_GOAL_PCT:g} % of a core per call")}
        many = next((lv for lv in levels if lv["calls"] >= MANY_CALLS), None)
        u = None if many is None else many["underruns"] + (many["calls"] - many["playing"])
        out["underruns"] = {"value": u, "calls": many["calls"] if many else None,
                            "mark": goal_mark(u, UNDERRUN_GOAL, f"{MANY_CALLS} calls, {UNDERRUN_GOAL} underruns")}
    if "room" in r:
        out["room"] = {"value": r["room"]["worst_pct"], "mark": r["room"]["mark"]}
    return out


def _f(x: Any, digits: int = 0) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def report(r: dict[str, Any]) -> str:
    lines = [f"{r['cpus']} CPUs; load average {r['loadavg_start']} at the start, {r['loadavg_end']} at the end."]
    g = r.get("goals", {})
    if "v2v" in r:
        v = r["v2v"]
        lines += ["", f"V2V, {v['prompts']} spoken prompts per transport per run, {len(v['runs'])} run(s), "
                      "ms from the last voiced sample:", "",
                  "| run | load avg | WebSocket p50 / p90 | WebRTC p50 / p90 (track) | WebRTC wire p50 | "
                  "diff p50 (track / wire) | underruns WS / RTC | errors |", "|---|---|---|---|---|---|---|---|"]
        for k, run in enumerate(v["runs"]):
            s = run["summary"]
            ws, rtc = s["websocket"], s["webrtc"]
            p = lambda x, key, q: _f((x.get(key) or {}).get(q))  # noqa: E731
            lines.append(f"| {k + 1} | {run['loadavg_start'][0]} | {p(ws, 'v2v_ms', 'p50')} / {p(ws, 'v2v_ms', 'p90')} | "
                         f"{p(rtc, 'v2v_ms', 'p50')} / {p(rtc, 'v2v_ms', 'p90')} | {p(rtc, 'v2v_wire_ms', 'p50')} | "
                         f"{_f(s['diff_p50_ms'])} / {_f(s['diff_wire_p50_ms'])} | {ws['underruns']} / {rtc['underruns']} | "
                         f"{ws['errors'] + rtc['errors']} |")
        m = v["median"]
        t = lambda key: m.get(key, {}).get("text", "-")  # noqa: E731
        lines += ["", "Median of the runs (min-max), ms from the last voiced sample:", "",
                  "| leg | WebSocket p50 | WebRTC p50 |", "|---|---|---|",
                  f"| speech_stopped arrives (VAD's 500 ms included) | {t('websocket_speech_stopped_ms_p50')} | "
                  f"{t('webrtc_speech_stopped_ms_p50')} |",
                  f"| response.created arrives | {t('websocket_response_created_ms_p50')} | "
                  f"{t('webrtc_response_created_ms_p50')} |",
                  f"| the worker's own V2V (speech stopped -> first audio, `session.metrics`; not from the mark) | "
                  f"{t('websocket_worker_v2v_ms_p50')} | {t('webrtc_worker_v2v_ms_p50')} |",
                  f"| output_audio_buffer.started arrives (gateway's track took the first frame) | | "
                  f"{t('webrtc_started_ms_p50')} |",
                  f"| first reply packet on the wire | | {t('webrtc_v2v_wire_ms_p50')} |",
                  f"| **V2V**: first reply audio playable (WS: delta; RTC: decoded frame off the track) | "
                  f"{t('websocket_v2v_ms_p50')} | {t('webrtc_v2v_ms_p50')} |",
                  f"| V2V p90 | {t('websocket_v2v_ms_p90')} | {t('webrtc_v2v_ms_p90')} |",
                  f"| V2V less the worker's own V2V (input, VAD's 500 ms, output: no model time) | "
                  f"{t('websocket_v2v_less_worker_ms_p50')} | {t('webrtc_v2v_less_worker_ms_p50')} (wire "
                  f"{t('webrtc_v2v_wire_less_worker_ms_p50')}) |",
                  "", f"WebRTC - WebSocket, V2V p50: {m['diff_p50_ms']['text']} ms (at the wire: "
                      f"{m['diff_wire_p50_ms']['text']} ms); {g['v2v']['mark']}. Less the worker's own V2V "
                      f"(the model's time taken out of each turn): {t('diff_less_worker_p50_ms')} ms (at the "
                      f"wire: {t('diff_wire_less_worker_p50_ms')} ms). Underruns: WebSocket "
                      f"{m['underruns']['websocket']}, WebRTC {m['underruns']['webrtc']} (on the wire "
                      f"{m.get('webrtc_wire_underruns', '-')}; idle frames inside replies: "
                      f"{m.get('webrtc_dry_frames', '-')}), all runs."]
    if "transport" in r:
        tp = r["transport"]
        ws, rtc, a = tp["websocket"], tp["webrtc"], tp["added_p50_ms"]
        q = lambda x: f"{x['p50']['text']} / {x['p90']['text']} (n={x['n']})"  # noqa: E731
        a = {k: v["text"] for k, v in a.items()}
        lines += ["", f"One-way latency of each transport alone (synthetic worker's probes, {len(tp['runs'])} run(s) of "
                      f"{tp['seconds']:g} s, both transports at once; load average {tp['loadavg_start'][0]} at the "
                      f"start); ms p50 / p90, the median of the runs (min-max):", "",
                  "| leg | WebSocket | WebRTC | WebRTC added (p50) |", "|---|---|---|---|",
                  f"| in: sample spoken -> its chunk at the worker | {q(ws['in_ms'])} | {q(rtc['in_ms'])} | {a['in']} |",
                  f"| out: delta sent by the worker -> first reply packet at the client (wire) | {q(ws['out_ms'])} | "
                  f"{q(rtc['out_wire_ms'])} | {a['out_wire']} |",
                  f"| out: ... -> decoded frame off the client's track | {q(ws['out_ms'])} | {q(rtc['out_ms'])} | "
                  f"{a['out']} |",
                  f"| **a turn (in + out)** | | | **{a['turn']}** (at the wire {a['turn_wire']}) |",
                  "", f"Transport alone: {g['transport']['mark']}; {g['transport']['wire_mark']}."]
    if "load" in r:
        lines += _load_table(r["load"], "calls", "K live calls")
        lines += ["", f"Goals: {g['cpu']['mark']} (worst level: {_f(g['cpu']['value'], 2)} %); "
                      f"{g['underruns']['mark']}."]
    if "sessions" in r:
        lines += _load_table(r["sessions"], "sessions", "K WebSocket sessions")
    if "listening" in r:
        ls = r["listening"]
        lines += ["", f"One WebSocket session listening to a quiet room (gateway + a real worker), {ls['hold_s']:g} s "
                      f"windows, % of one core above idle (idle: gateway {ls['idle']['gateway']}, worker "
                      f"{ls['idle']['worker']}); the median of {len(ls['runs'])} runs (min-max):", "",
                  "| gateway | worker | both |", "|---|---|---|",
                  f"| {ls['gateway']['text']} | {ls['worker']['text']} | **{ls['both']['text']}** |"]
    return "\n".join(lines)


def _load_table(ld: dict[str, Any], noun: str, what: str) -> list[str]:
    """The load part's table (``noun``: calls or sessions)."""
    lines = ["", f"Gateway CPU and the event loop with {what} (synthetic worker, both directions "
                 f"flowing), {ld['hold_s']:g} s windows; CPU in % of one core:", "",
             f"| {noun} | gateway CPU | per {noun[:-1]} (above idle) | event loop thread | off the loop | /health p50 / "
             f"p99 / max ms | underruns ({noun}) | worst late ms | on the wire: underruns, worst late ms | dry frames "
             "| reply s | clients CPU | worker CPU | load avg |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for lv in ld["levels"]:
        k = lv["calls"]
        per = f"{lv['per_call_pct']:.2f} ({lv['per_call_above_idle_pct']:.2f})" if k else "-"
        h = lv["health_ms"]
        playing = "" if lv.get("playing", k) == k else f" ({lv['playing']} playing)"
        lines.append(f"| {k}{playing} | "
                     f"{lv['gateway_cpu_pct']:.1f} | {per} | {lv['gateway_loop_cpu_pct']:.1f} | "
                     f"{lv['gateway_off_loop_cpu_pct']:.1f} | {h['p50']} / {h['p99']} / {h['max']} | "
                     f"{lv['underruns']} ({lv['calls_with_underruns']}) | {lv['worst_late_ms']} | "
                     f"{lv.get('wire_underruns', '-')}, {lv.get('wire_worst_late_ms', '-')} | {lv['dry_frames']} | "
                     f"{lv['reply_s']} | {lv['bench_cpu_pct']:.0f} | {lv['worker_cpu_pct']:.0f} | "
                     f"{lv['loadavg_end'][0]} |")
    return lines
