"""``/api/admin/voices``: reference voices for a backend that clones a voice from a sample (the
``reference_voices`` capability). A sample is decoded and kept as 24 kHz mono PCM16 WAV in
``data/voices/``, written atomically; a backend without the capability gets 409 with why."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, HTTPException, UploadFile

from gateway.pool.interface import SessionQueue

VOICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,47}$")
VOICE_MAX_BYTES = 10 * 2**20
VOICE_MAX_SECONDS = 60.0
VOICES_CAPABILITY = "reference_voices"  # a backend that clones a voice from an uploaded sample


def voices_api(pool: SessionQueue, data_dir: Path) -> APIRouter:
    router = APIRouter()
    voices_dir = data_dir / "voices"

    def voice_workers() -> list[str]:
        return [w.id for w in pool.workers() if VOICES_CAPABILITY in w.capabilities and w.health.value != "dead"]

    def need_voices() -> None:
        if not voice_workers():
            raise HTTPException(409, "this backend has no reference voices (no worker offers the "
                                f"'{VOICES_CAPABILITY}' capability); its built-in voice cannot be changed here")

    @router.get("/api/admin/voices")
    async def list_voices() -> dict[str, Any]:
        workers = voice_workers()
        names = await asyncio.to_thread(
            lambda: sorted(p.stem for p in voices_dir.glob("*.wav")) if voices_dir.is_dir() else [])
        return {"supported": bool(workers), "workers": workers, "voices": names if workers else []}

    @router.post("/api/admin/voices", status_code=201)
    async def upload_voice(name: Annotated[str, Form()], file: Annotated[UploadFile, File()]) -> dict[str, Any]:
        need_voices()
        if not VOICE_NAME.match(name):
            raise HTTPException(422, "name: letters, digits, _ and -, at most 48 characters")
        data = await file.read(VOICE_MAX_BYTES + 1)
        if len(data) > VOICE_MAX_BYTES:
            raise HTTPException(413, f"voice sample larger than {VOICE_MAX_BYTES // 2**20} MB")
        seconds = await asyncio.to_thread(_save_voice, data, voices_dir / f"{name}.wav")
        return {"name": name, "seconds": seconds}

    @router.delete("/api/admin/voices/{name}")
    async def delete_voice(name: str) -> dict[str, Any]:
        need_voices()
        path = voices_dir / f"{name}.wav"
        if not VOICE_NAME.match(name) or not path.is_file():
            raise HTTPException(404, f"no voice {name!r}")
        await asyncio.to_thread(path.unlink)
        return {"deleted": name}

    return router


def _save_voice(data: bytes, path: Path) -> float:
    """Decode any supported audio, keep it as 24 kHz mono PCM16 WAV (what voice-cloning backends read)."""
    import numpy as np

    from core.errors import InvalidAudioError
    from core.media import decode_audio, write_wav

    try:
        audio = decode_audio(data, rate=24000, max_seconds=VOICE_MAX_SECONDS)
    except InvalidAudioError as exc:
        raise HTTPException(422, exc.message) from None
    seconds = len(audio) / 24000
    if seconds < 1.0 or seconds > VOICE_MAX_SECONDS:
        raise HTTPException(422, f"a reference voice needs 1 to {VOICE_MAX_SECONDS:.0f} s of speech "
                                 f"(got {seconds:.1f} s)")
    write_wav(path, (np.clip(audio, -1, 1) * 32767).astype("<i2"), 24000)  # atomic
    return round(seconds, 2)
