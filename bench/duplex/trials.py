"""The trials: a complete or paused clip (``turn_trial``), a backchannel or interruption over a
long reply (``overlap_trial``), and all of them per mode, interleaved (``run_all``)."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import websockets

from bench.duplex.client import Mic, Trial, rel_ms
from bench.duplex.common import (BACKCHANNEL_WINDOW_S, DETECT_WINDOW_S, GRID_CHUNKS, LEAD_S, LIVE, LONG_INSTRUCTIONS,
                                 LONG_TOKENS, MODES, NEXT_AUDIO_S, NEXT_WAIT_S, OVERLAP_ONLY, PLAYED_S, REPLY_WAIT_S,
                                 STORY_BACK_S, TURN_ONLY, WAIT_S, mentions)
from bench.duplex_set import OVERLAP_KINDS, RATE, Clip, prompts
from bench.turns import Refused, open_session, until_ready  # one GA session setup for both turn benches


async def turn_trial(url: str, mode: str, clip: Clip) -> dict[str, Any]:
    """A complete or paused clip after LEAD_S of silence: latency, or a takeover in the pause."""
    it = clip.item
    r: dict[str, Any] = {"mode": mode, "item": it.id, "kind": it.kind, "text": it.text, "voice": it.voice}
    live = mode == LIVE
    ws = await (open_live_session(url) if live else open_session(url, MODES[mode]))
    mic = Mic(ws, "session.input_audio.append" if live else "input_audio_buffer.append").start()
    tr = Trial(ws, mic, live=live)
    marks = {"last_voiced": clip.last_voiced}
    if clip.pause_start is not None:
        marks.update(pause_start=clip.pause_start, resume=clip.resume)
    mic.say(np.concatenate([np.zeros(int(LEAD_S * RATE), np.int16), clip.pcm]),
            {k: v + int(LEAD_S * RATE) for k, v in marks.items()})
    try:
        while True:
            await tr.pump()
            now = time.monotonic()
            lv = mic.marks.get("last_voiced")
            if lv is not None and now > lv + WAIT_S:
                break
            if lv is not None and any(t >= lv for t in tr.first_audio.values()):
                if it.kind == "complete":
                    break
                resume = mic.marks.get("resume")
                if any(tr.created.get(rid, 0) >= resume for rid in tr.first_audio):
                    break
        settle = time.monotonic() + 0.5  # the turn's transcript may still be on its way
        while not tr.user and time.monotonic() < settle:
            await tr.pump(0.05)
    finally:
        await tr.close()
    lv = mic.marks.get("last_voiced")
    after = [t for t in tr.first_audio.values() if lv is not None and t >= lv]
    r.update(user=tr.user, errors=tr.errors, events=tr.timeline())
    if it.kind == "complete":
        r["latency_ms"] = tr.rel_ms(min(after), lv) if after else None
        r["answered"] = bool(after)
        # where that time went: the turn's end (speech_stopped) after the last voiced sample, and
        # the first audio after the turn's end (0 when the held reply was ready)
        first = min(after) if after else None
        stops = [t for t, k in tr.events if k == "input_audio_buffer.speech_stopped"
                 and lv is not None and lv <= t <= (first or float("inf"))]
        r["stopped_ms"] = tr.rel_ms(stops[-1], lv) if stops else None
        r["audio_after_stop_ms"] = tr.rel_ms(first, stops[-1]) if stops and first is not None else None
        r["early_audio"] = any(lv is None or t < lv for t in tr.first_audio.values())
    else:
        r.update(paused_outcome(tr.created, tr.first_audio, mic.marks.get("pause_start"),
                                mic.marks.get("resume"), lv))
    return r


def paused_outcome(created: dict[str, float], first_audio: dict[str, float], pause: float | None,
                   resume: float | None, last_voiced: float | None) -> dict[str, Any]:
    """A paused clip's takeover and latency from when each response was created and first sounded
    (monotonic seconds) and the clip's marks. A reply begun after the user went on but before they
    finished talks over the rest of the turn (semantic_vad ended it at a pause inside the second
    half): a takeover to a listener too, though Full-Duplex-Bench's rate counts the pause alone
    (``takeover_in_pause``). The latency is the first audio after the voice's end of a response
    created after the speech resumed."""
    starts = [*created.values(), *first_audio.values()]
    in_pause = [t for t in starts if pause is not None and pause <= t < (resume or float("inf"))]
    over_rest = [t for t in starts if resume is not None and last_voiced is not None and resume <= t < last_voiced]
    takeover = bool(in_pause or over_rest)
    full = [t for rid, t in first_audio.items() if resume is not None and created.get(rid, 0) >= resume
            and last_voiced is not None and t >= last_voiced]
    return {"takeover": takeover, "takeover_in_pause": bool(in_pause),
            "takeover_ms_after_pause": rel_ms(min(in_pause + over_rest), pause) if takeover else None,
            "answered": bool(full), "latency_ms": rel_ms(min(full), last_voiced) if full else None}


async def overlap_trial(url: str, mode: str, clip: Clip, prompt: str, played_s: float,
                        grid_place: int = 0) -> dict[str, Any]:
    """A long reply plays; after ``played_s`` of it has been heard, the clip (a backchannel or an
    interruption) is streamed over it, from its ``grid_place`` (``GRID_CHUNKS``)."""
    it = clip.item
    r: dict[str, Any] = {"mode": mode, "item": it.id, "kind": it.kind, "text": it.text, "voice": it.voice,
                         "prompt": prompt, "played_before_s": played_s}
    live = mode == LIVE
    if live:  # the long reply asked for as a Live client can: the prompt and a response, delegated
        ws = await open_live_session(url, {"instructions": LONG_INSTRUCTIONS, "delegation": {
            "type": "responses", "responses": {"model": "omniduplex-cascade", "max_output_tokens": LONG_TOKENS}}})
        await ws.send(json.dumps({"type": "response.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}}))
        await ws.send(json.dumps({"type": "response.create"}))
    else:
        ws = await open_session(url, MODES[mode])
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}}))
        await ws.send(json.dumps({"type": "response.create", "response": {
            "instructions": LONG_INSTRUCTIONS, "max_output_tokens": LONG_TOKENS}}))
    mic = Mic(ws, "session.input_audio.append" if live else "input_audio_buffer.append").start()
    tr = Trial(ws, mic, live=live)
    asked = time.monotonic()
    reply: str | None = None  # the long reply's response id
    said = False
    r["status"] = "ok"
    try:
        while True:
            await tr.pump()
            now = time.monotonic()
            if reply is None and tr.order:
                reply = tr.order[0]
            if not said:
                item = tr.items.get(reply) if reply else None
                if item is not None and tr.player.played_s(item, now) >= played_s:
                    mic.say(clip.pcm, {"onset": 0, "last_voiced": clip.last_voiced}, grid_place)
                    said = True
                elif reply in tr.done and tr.player.end <= now or now - asked > REPLY_WAIT_S:
                    r["status"] = "short" if reply in tr.first_audio else "no reply"
                    break
                continue
            lv, onset = mic.marks.get("last_voiced"), mic.marks.get("onset")
            if lv is None:
                continue
            if it.kind == "backchannel":
                if now > lv + BACKCHANNEL_WINDOW_S:
                    break
                continue
            nxt = next_reply(tr, reply, onset)
            if it.kind == "cutin":  # taken as a turn or not: its answer's content is not judged
                if nxt is not None and nxt in tr.first_audio or tr.resumed or now > lv + DETECT_WINDOW_S + 1.0:
                    break
                continue
            first = tr.first_audio.get(nxt) if nxt is not None else None
            if nxt in tr.done or first is not None and (mentions(tr.text.get(nxt, ""), it.expect)
                                                        or now > first + NEXT_AUDIO_S):
                break
            if now > lv + NEXT_WAIT_S:
                break
        if said:
            settle = time.monotonic() + 0.3
            while time.monotonic() < settle:
                await tr.pump(0.05)
    finally:
        await tr.close()
    r.update(user=tr.user, errors=tr.errors, events=tr.timeline(), truncates=[
        {"item_id": t["item_id"], "audio_end_ms": t["audio_end_ms"], "at_ms": round((t["at"] - tr.t0) * 1000)}
        for t in tr.truncates], backchannels=[w for _, w in tr.backchannels], resumed=len(tr.resumed),
        reply_text=tr.text.get(reply, "") if reply else "")
    if not said:
        return r
    onset, lv = mic.marks.get("onset"), mic.marks.get("last_voiced")
    if live:  # no speech_started in Live: the reply stopped where the listener's player ran dry
        dry = tr.ran_dry_after(onset)
        tr.speech_started = [dry] if dry is not None else []
    reply_end = tr.player.end if reply not in tr.cut else None  # when the uncut reply stops playing
    r["reply_gaps_s"] = round(tr.player.gaps_s, 2)
    r["reply_audio_s"] = round(sum(e - s for i, _, s, e in tr.player.segments if i == tr.items.get(reply)), 2)
    starts = [t for t in tr.speech_started if onset <= t]
    done_t, status, reason = tr.done.get(reply, (None, None, None))
    r.update(reply_status=status, reply_reason=reason)
    # What the listener heard (issue 69): the cut reply's audio as received and played, not the
    # arrival of speech_started. silence_ms: from the onset to the end of the last of its audio
    # the listener heard (0 when it had stopped sounding before the onset); last_audio_ms: the
    # last of its audio the client received after the onset.
    heard_end = tr.player.heard_end(reply) if reply else None
    r["silence_ms"] = tr.rel_ms(max(heard_end, onset), onset) if heard_end is not None else None
    last = tr.last_audio.get(reply) if reply else None
    r["last_audio_ms"] = tr.rel_ms(last, onset) if last is not None and last >= onset else None
    r.update(verdict_of_voice(tr, reply, onset, lv + (BACKCHANNEL_WINDOW_S if it.kind == "backchannel"
                                                      else DETECT_WINDOW_S + 1.0)))
    if it.kind == "backchannel":
        window = lv + BACKCHANNEL_WINDOW_S
        seen = [t for t in starts if t <= window]
        new = [rid for rid in tr.order if rid != reply and onset <= tr.created[rid] <= window]
        cancelled = status == "cancelled" and done_t is not None and done_t >= onset
        back = [tr.first_audio[rid] for rid in tr.resumed if rid in tr.first_audio]
        answer = [rid for rid in new if rid not in tr.resumed]
        r.update(story_outcome(bool(seen), cancelled, bool(answer), min(back) if back else None, lv))
        r["story_back_ms"] = tr.rel_ms(min(back), lv) if back else None
        if reply_end is not None and reply_end < lv and not r["false_interruption"]:
            r["status"] = "ended"  # the reply had stopped playing before the backchannel did
        r["backchannel_ms"] = tr.rel_ms(tr.backchannels[0][0], onset) if tr.backchannels else None
        return r
    seen = [t for t in starts if t <= lv + DETECT_WINDOW_S]
    r["detected"] = bool(seen)
    r["seen_ms"] = tr.rel_ms(seen[0], onset) if seen else None
    if it.kind == "cutin":  # taken only on a verdict: the voice became a turn, or an answer sounded
        r["taken"] = r["verdict"] == "interruption"
        return r
    r["stop_ms"] = None  # not seen, or the reply never ended within the trial
    if seen and done_t is not None:
        stop_t = max(tr.last_audio.get(reply, seen[0]), done_t) if done_t >= onset else seen[0]
        r["stop_ms"] = tr.rel_ms(stop_t, onset)
    nxt = next_reply(tr, reply, onset)
    text = tr.text.get(nxt, "") if nxt else ""
    r["next_text"] = text
    r["relevant"] = bool(nxt) and mentions(text, it.expect)
    first = tr.first_audio.get(nxt) if nxt else None
    r["answer_ms"] = tr.rel_ms(first, lv) if first is not None else None
    return r


def story_outcome(seen: bool, cancelled: bool, answered: bool, back: float | None, last_voiced: float) -> dict[str, Any]:
    """A backchannel's outcome for the story (both transports, and ``bench duplex --room``): whether
    ``speech_started`` came in its window (``seen``), the reply was cancelled after its onset, a new
    reply (not a resumption) answered it, and when the resumed reply first sounded (``back``,
    monotonic seconds, or None). Taken as an interruption (``why``): stopped and never resumed, or
    answered; a reply that yielded at the onset and came back (issue 47's default) was ``paused``,
    not taken. Lost, what the listener notices: the story stopped and did not come back within
    ``STORY_BACK_S`` of the voice's last voiced sample, or the backchannel got an answer."""
    why = [w for w, yes in (("speech_started", seen and back is None), ("cancelled", cancelled and back is None),
                            ("new_response", answered)) if yes]
    stopped = seen or cancelled
    return {"why": why, "paused": seen and back is not None, "false_interruption": bool(why),
            "story_lost": answered or (stopped and not (back is not None and back <= last_voiced + STORY_BACK_S))}


def verdict_of_voice(tr: Trial, reply: str | None, onset: float, until: float) -> dict[str, Any]:
    """What the server decided about the voice over the reply, from what it sent by ``until``:
    "interruption" (a user turn committed after the onset, or the next reply's audio began),
    "backchannel" (a backchannel event, or the reply resumed), or None: undecided, counted apart
    for every kind (issue 69; before, an undecided cut-in counted as taken). An answer that
    sounded wins over an earlier backchannel call."""
    nxt = next_reply(tr, reply, onset)
    return decide_voice(tr.first_audio.get(nxt) if nxt is not None else None, tr.committed,
                        [t for t, _ in tr.backchannels], bool(tr.resumed), onset, until)


def decide_voice(next_audio: float | None, committed: list[float], backchannels: list[float], resumed: bool,
                 onset: float, until: float) -> dict[str, Any]:
    """The verdict rule, for either transport: the next reply's first audio, the turns committed
    and the backchannel events (monotonic seconds), whether the reply resumed."""
    answered = next_audio is not None and next_audio <= until
    turn = any(onset <= t <= until for t in committed)
    dropped = any(onset <= t <= until for t in backchannels) or resumed
    verdict = "interruption" if answered or turn and not dropped else "backchannel" if dropped else None
    return {"verdict": verdict, "undecided": verdict is None}


def next_reply(tr: Trial, reply: str | None, onset: float | None) -> str | None:
    """The first response created after the onset that is neither the long reply nor its resumption."""
    if onset is None:
        return None
    return next((rid for rid in tr.order if rid != reply and rid not in tr.resumed and tr.created[rid] >= onset),
                None)


def modes_for(kind: str, modes: list[str]) -> list[str]:
    if kind in OVERLAP_KINDS:
        return [m for m in modes if m not in TURN_ONLY]
    return [m for m in modes if m not in OVERLAP_ONLY]


async def open_live_session(url: str, session: dict[str, Any] | None = None):
    """A Live session (``/v1/live/sessions``) on the same gateway as the Realtime ``url``: started,
    with the server's defaults (semantic turn detection) and ``session``'s fields, or ``Refused``."""
    base = url.split("/v1/realtime", 1)[0]
    query = url.split("?", 1)[1] if "?" in url else ""
    ws = await websockets.connect(f"{base}/v1/live/sessions?{query}", max_size=None, compression=None,
                                  ping_interval=None, open_timeout=600)
    try:
        await ws.send(json.dumps({"type": "session.start", "session": {"model": "omniduplex-cascade", **(session or {})}}))
        return await until_ready(ws, "session.started", 600)
    except BaseException:
        await ws.close()
        raise


async def run_all(url: str, part: str, modes: list[str], clips: list[Clip], log) -> tuple[list[dict], dict[str, str]]:
    refused: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    long_prompts = prompts(part)
    try:  # warm-up: the first ASR / LLM / TTS calls
        turn = next((c for c in clips if c.item.kind in ("complete", "paused")), None)
        if turn is not None:
            await turn_trial(url, "server_vad", turn)
        else:
            await overlap_trial(url, "server_vad", clips[0], long_prompts[0], PLAYED_S[0])
    except Exception as exc:  # noqa: BLE001 - a failed warm-up shows again in the real trials
        log(f"warm-up failed: {exc!r}")
    counters: dict[str, int] = {}
    for clip in clips:
        kind = clip.item.kind
        n = counters[kind] = counters.get(kind, -1) + 1
        mine = modes_for(kind, modes)
        if not mine:
            continue
        for mode in mine[n % len(mine):] + mine[:n % len(mine)]:
            if mode in refused:
                continue
            try:
                if kind in ("complete", "paused"):
                    row = await turn_trial(url, mode, clip)
                else:
                    row = await overlap_trial(url, mode, clip, long_prompts[n % len(long_prompts)],
                                              PLAYED_S[n % len(PLAYED_S)], n % GRID_CHUNKS)
            except Refused as exc:
                refused[mode] = str(exc)
                log(f"{mode}: refused: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 - counted, not fatal
                row = {"mode": mode, "item": clip.item.id, "kind": kind, "error": repr(exc)}
            rows.append(row)
            log(_row_line(row))
    return rows, refused


def _row_line(r: dict[str, Any]) -> str:
    head = f"{r['mode']:19s} {r['item']:8s}"
    if "error" in r:
        return f"{head} error {r['error']}"
    kind = r["kind"]
    if kind == "complete":
        early = " talked over (audio before the voice's end)" if r.get("early_audio") else ""
        return f"{head} latency={r['latency_ms']}{early} {r['user']}"
    if kind == "paused":
        over = " (over the rest of the turn)" if r["takeover"] and not r.get("takeover_in_pause", True) else ""
        return f"{head} takeover={r['takeover']}{over} latency={r['latency_ms']} {r['user']}"
    if r.get("status") != "ok":
        return f"{head} {r.get('status')} (reply {r.get('reply_audio_s')} s) {r.get('reply_text', '')[:60]!r}"
    if kind == "backchannel":
        return (f"{head} false={r['false_interruption']} {r['why']} lost={r['story_lost']} "
                f"back={r['story_back_ms']} {r['text']!r} heard {r['user']}, as backchannel {r['backchannels']}")
    if kind == "cutin":
        return (f"{head} taken={r['taken']} verdict={r['verdict']} seen={r['seen_ms']} silence={r['silence_ms']} "
                f"{r['text']!r} heard {r['user']}")
    return (f"{head} detected={r['detected']} verdict={r['verdict']} seen={r['seen_ms']} silence={r['silence_ms']} "
            f"stop={r['stop_ms']} answer={r['answer_ms']} "
            f"relevant={r['relevant']} heard {r['user']} -> {r['next_text'][:80]!r}")
