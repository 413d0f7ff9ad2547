"""A spoken turn-taking evaluation set: complete questions and utterances with a pause mid-sentence.

    from bench.turn_set import items, synthesize
    clip = synthesize(items("paused")[0])  # PCM16 24 kHz mono + where the speech is

- ``complete``: a whole question or request; the system should answer it quickly.
- ``paused``: an unfinished phrase (ending in a preposition, an article, a conjunction, a filler,
  "I was wondering if"...), 0.6-1.5 s of silence (fixed per item), then the rest. Answering inside
  the pause is a cut-in.

Spoken with Debian ``espeak-ng`` (not the project's Piper voice), several voices, speeds and
pitches, assigned round-robin within each kind so each kind uses every voice. Each espeak piece is
resampled 22050 -> 24000 Hz and trimmed to its first/last sample above ``VOICED``, so the last
voiced sample is well defined. WAVs (and a JSON sidecar with the sample marks) are cached under
``data/turn_set/`` (git-ignored), keyed by a hash of the text, voice and pause; only the texts and
voice parameters live here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "data" / "turn_set"
RATE = 24000
ESPEAK_RATE = 22050
VOICED = 300  # |sample| above this (int16, about -40 dBFS) counts as voiced when trimming
SYNTH_VERSION = 1  # bump when synthesis changes, so cached WAVs are remade

# (espeak-ng voice, words per minute, pitch 0-99); all clearly intelligible to Whisper.
VOICES: list[tuple[str, int, int]] = [
    ("en-us", 165, 50),
    ("en-gb", 175, 45),
    ("en-us+f3", 155, 60),
    ("en-gb-x-rp+m3", 185, 40),
    ("en-us+m7", 150, 35),
]

COMPLETE: list[str] = [
    "What is the capital of Australia?",
    "How many days are there in a week?",
    "Can you recommend a good book?",
    "Please set a timer for ten minutes.",
    "What time does the sun set today?",
    "How many legs does a spider have?",
    "Who painted the Mona Lisa?",
    "How do I boil an egg?",
    "What is the tallest mountain in the world?",
    "Can you help me write an email to my boss?",
    "Why is the sky blue?",
    "Give me three ideas for dinner tonight.",
    "How far away is the moon?",
    "What is the boiling point of water?",
    "How do you say hello in French?",
    "What should I bring to the beach?",
    "How many players are on a football team?",
    "Tell me a funny story.",
    "Which planet is the biggest?",
    "What is your favourite animal?",
    "Remind me to call my mother tomorrow.",
    "How many hours should I sleep?",
]

# (unfinished phrase, pause in seconds, the rest). Pauses spread over 0.6-1.5 s.
PAUSED: list[tuple[str, float, str]] = [
    ("I would like to know the capital of", 0.9, "Australia."),
    ("Can you tell me how many", 1.2, "days there are in a year?"),
    ("My favourite food is, um,", 0.7, "pasta."),
    ("I was wondering if", 1.4, "you could recommend a good film."),
    ("Could you set a timer for", 0.6, "fifteen minutes?"),
    ("What is the best way for me to", 1.1, "learn a new language?"),
    ("Tell me something interesting about", 1.3, "octopuses."),
    ("I need a recipe for a cake with chocolate and", 0.8, "strawberries."),
    ("Who was the first person to", 1.0, "walk on the moon?"),
    ("How long does it take to fly from London to", 1.5, "New York?"),
    ("Can you give me some tips on", 0.65, "saving money?"),
    ("I think I want to go to the cinema but", 1.25, "I do not know what to watch."),
    ("What is the difference between a", 0.85, "cat and a dog?"),
    ("So, uh,", 1.05, "what is the weather usually like in Spain?"),
    ("Please remind me to buy", 1.35, "milk and bread."),
    ("Why is the ocean", 0.75, "salty?"),
    ("If I leave now, will I get there before", 1.15, "the shop closes?"),
    ("My sister asked me whether", 0.95, "bananas grow on trees."),
    ("I have been trying to figure out how to", 1.45, "fix my bike chain."),
    ("Could you explain the rules of", 0.7, "chess to me?"),
    ("What would happen if the", 1.2, "moon disappeared?"),
    ("I want to plant some flowers, maybe", 0.9, "roses or tulips."),
]


@dataclass(frozen=True, slots=True)
class Item:
    id: str
    kind: str  # "complete" or "paused"
    parts: tuple[str, ...]  # one piece, or (before the pause, after it)
    pause_s: float  # 0 for complete items
    voice: str
    speed: int
    pitch: int

    @property
    def text(self) -> str:
        return " ".join(self.parts)

    def key(self) -> str:
        spec = json.dumps([SYNTH_VERSION, self.parts, self.pause_s, self.voice, self.speed, self.pitch])
        return hashlib.sha1(spec.encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class Clip:
    item: Item
    pcm: np.ndarray  # int16, mono, RATE
    last_voiced: int  # sample index of the last voiced sample
    pause_start: int | None  # paused items: first silent sample of the pause
    resume: int | None  # paused items: first voiced sample after it
    path: Path

    @property
    def seconds(self) -> float:
        return self.pcm.size / RATE


def _all_items() -> list[Item]:
    out = []
    for i, text in enumerate(COMPLETE):
        v, s, p = VOICES[i % len(VOICES)]
        out.append(Item(f"c{i:02d}", "complete", (text,), 0.0, v, s, p))
    for i, (before, pause, after) in enumerate(PAUSED):
        v, s, p = VOICES[i % len(VOICES)]
        out.append(Item(f"p{i:02d}", "paused", (before, after), pause, v, s, p))
    return out


ITEMS: list[Item] = _all_items()


def items(kind: str | None = None, limit: int | None = None) -> list[Item]:
    """The items of one kind (or all, complete first), the first ``limit`` of each kind."""
    kinds = [kind] if kind else ["complete", "paused"]
    out: list[Item] = []
    for k in kinds:
        of_kind = [it for it in ITEMS if it.kind == k]
        out += of_kind[:limit] if limit is not None else of_kind
    return out


def espeak_path() -> str | None:
    return shutil.which("espeak-ng")


def _espeak(text: str, voice: str, speed: int, pitch: int) -> np.ndarray:
    """One piece spoken by espeak-ng, resampled to RATE and trimmed to its voiced span (int16)."""
    exe = espeak_path()
    if exe is None:
        raise RuntimeError("espeak-ng is not installed (apt-get install espeak-ng)")
    raw = subprocess.run([exe, "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout", text],
                         check=True, capture_output=True, timeout=60).stdout
    # --stdout writes a streaming WAV whose size fields are bogus: find the data chunk by hand.
    at = raw.find(b"data", 12)
    if raw[:4] != b"RIFF" or at < 0:
        raise RuntimeError(f"espeak-ng gave no WAV for {text!r}")
    rate = int.from_bytes(raw[24:28], "little")
    pcm = np.frombuffer(raw[at + 8:len(raw) - (len(raw) - at - 8) % 2], dtype="<i2")
    out = soxr.resample(pcm.astype(np.float32), rate, RATE)
    out = np.clip(np.round(out), -32768, 32767).astype(np.int16)
    voiced = np.flatnonzero(np.abs(out.astype(np.int32)) > VOICED)
    if voiced.size == 0:
        raise RuntimeError(f"espeak-ng gave silence for {text!r}")
    return out[voiced[0]:voiced[-1] + 1]


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _wav_bytes(pcm: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm.astype("<i2").tobytes())
    return buf.getvalue()


def _load(item: Item, wav_path: Path, meta_path: Path) -> Clip | None:
    try:
        meta = json.loads(meta_path.read_text())
        with wave.open(str(wav_path), "rb") as w:
            if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (RATE, 1, 2):
                return None
            pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").copy()
    except (OSError, ValueError, EOFError, wave.Error):
        return None
    if pcm.size != meta.get("samples"):
        return None
    return Clip(item, pcm, meta["last_voiced"], meta["pause_start"], meta["resume"], wav_path)


def synthesize(item: Item, cache_dir: Path | None = None) -> Clip:
    """The item as PCM16 24 kHz mono, from the cache or made with espeak-ng (then cached)."""
    cache = Path(cache_dir or CACHE)
    cache.mkdir(parents=True, exist_ok=True)
    wav_path = cache / f"{item.id}-{item.key()}.wav"
    meta_path = wav_path.with_suffix(".json")
    if wav_path.exists() and meta_path.exists():
        clip = _load(item, wav_path, meta_path)
        if clip is not None:
            return clip
    pieces = [_espeak(text, item.voice, item.speed, item.pitch) for text in item.parts]
    pause_start = resume = None
    if item.kind == "paused":
        pause_start = pieces[0].size
        gap = np.zeros(int(round(item.pause_s * RATE)), dtype=np.int16)
        resume = pause_start + gap.size
        pcm = np.concatenate([pieces[0], gap, pieces[1]])
    else:
        pcm = np.concatenate(pieces)
    meta = {"id": item.id, "kind": item.kind, "text": item.text, "voice": item.voice, "speed": item.speed,
            "pitch": item.pitch, "pause_s": item.pause_s, "rate": RATE, "samples": int(pcm.size),
            "last_voiced": int(pcm.size - 1), "pause_start": pause_start, "resume": resume}
    _write_atomic(wav_path, _wav_bytes(pcm))
    _write_atomic(meta_path, json.dumps(meta, indent=1).encode())
    return Clip(item, pcm, meta["last_voiced"], pause_start, resume, wav_path)


def synthesize_all(kind: str | None = None, limit: int | None = None,
                   cache_dir: Path | None = None) -> list[Clip]:
    return [synthesize(it, cache_dir) for it in items(kind, limit)]


def longest_silence(pcm: np.ndarray, threshold: int = VOICED) -> tuple[int, int]:
    """(start, length) of the longest run of samples at or below ``threshold``."""
    quiet = np.abs(pcm.astype(np.int32)) <= threshold
    edges = np.diff(np.concatenate([[0], quiet.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if starts.size == 0:
        return 0, 0
    i = int(np.argmax(ends - starts))
    return int(starts[i]), int(ends[i] - starts[i])


if __name__ == "__main__":
    for clip in synthesize_all():
        it = clip.item
        pause = "" if clip.pause_start is None else f" pause {clip.pause_start}-{clip.resume}"
        print(f"{it.id} {it.voice:14s} {clip.seconds:5.2f}s{pause} {it.text}")
