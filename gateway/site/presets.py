"""Chat presets for the browser pages: ``GET /api/presets``.

Built-in presets cover the common cases. An operator may replace them with
``<data_dir>/presets.json`` (a JSON list of presets, or ``{"presets": [...]}``). The file is
re-read when it changes, off the event loop; an invalid file is logged once per version, with
the reason, and the built-ins are served instead so the page never loses its presets.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from pathlib import Path
from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.instructions import DEFAULT_INSTRUCTIONS

log = logging.getLogger(__name__)

PRESETS_FILE = "presets.json"
# The embedded model's default instructions (one short spoken sentence, with examples): a 135M
# model answers far better under them (bench/fit/answer_fit.py). Presets that ask for a different
# style start from a neutral line instead, since the examples would pull every reply to one sentence.
_BASE = "You are a friendly voice assistant. Your replies are read aloud, so use plain words: no lists, no markdown."


class Preset(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")
    name: str = Field(min_length=1, max_length=80)
    instructions: str = Field("", max_length=8000)
    # The cascade has one voice; the field is passed on as audio.output.voice for backends with more.
    voice: str = Field("joe", min_length=1, max_length=64)
    temperature: float = Field(0.3, ge=0.0, le=2.0)
    max_output_tokens: int = Field(160, ge=1, le=4096)
    output_audio: bool = True


class PresetList(BaseModel):
    presets: list[Preset]
    source: Literal["builtin", "file"]


BUILTIN_PRESETS: tuple[Preset, ...] = (
    Preset(id="assistant", name="Helpful assistant", instructions=DEFAULT_INSTRUCTIONS, temperature=0.3,
           max_output_tokens=160),
    Preset(id="concise", name="Concise", temperature=0.2, max_output_tokens=60, instructions=DEFAULT_INSTRUCTIONS),
    Preset(id="tutor", name="Tutor", temperature=0.4, max_output_tokens=240,
           instructions=f"{_BASE} You are a patient tutor: explain step by step with a simple example, "
                        "then ask one short question to check understanding."),
    Preset(id="text-only", name="Text only (no speech)", instructions=DEFAULT_INSTRUCTIONS, temperature=0.3,
           max_output_tokens=200, output_audio=False),
)


class PresetFile(BaseModel):
    """``{"presets": [...]}``; a bare list is accepted too (see ``parse_presets``)."""

    model_config = ConfigDict(extra="forbid")
    presets: list[Preset] = Field(min_length=1, max_length=100)

    @field_validator("presets")
    @classmethod
    def _unique_ids(cls, v: list[Preset]) -> list[Preset]:
        ids = [p.id for p in v]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"duplicate preset ids: {', '.join(dupes)}")
        return v


def parse_presets(text: str) -> list[Preset]:
    """Presets from the file's text; raises ``ValueError`` with a readable reason."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if isinstance(data, list):
        data = {"presets": data}
    try:
        return PresetFile.model_validate(data).presets
    except ValidationError as exc:
        reasons = "; ".join(
            f"{'.'.join(str(x) for x in e['loc']) or 'file'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise ValueError(reasons) from None


class PresetStore:
    """Serves the file's presets if it exists and is valid, else the built-ins."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / PRESETS_FILE
        self._lock = threading.Lock()
        self._key: tuple[int, int] | None = None  # (mtime_ns, size) of the version cached
        self._cached = PresetList(presets=list(BUILTIN_PRESETS), source="builtin")

    def load(self) -> PresetList:
        """Blocking (stat + read); call it in a thread."""
        with self._lock:
            try:
                st = self.path.stat()
            except FileNotFoundError:
                self._key = None
                self._cached = PresetList(presets=list(BUILTIN_PRESETS), source="builtin")
                return self._cached
            key = (st.st_mtime_ns, st.st_size)
            if key == self._key:
                return self._cached
            self._key = key
            try:
                presets = parse_presets(self.path.read_text(encoding="utf-8"))
                self._cached = PresetList(presets=presets, source="file")
                log.info("loaded %d presets from %s", len(presets), self.path)
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                log.error("ignoring %s (using the built-in presets): %s", self.path, exc)
                self._cached = PresetList(presets=list(BUILTIN_PRESETS), source="builtin")
            return self._cached


def presets_router(data_dir: Path) -> APIRouter:
    router = APIRouter()
    store = PresetStore(data_dir)

    @router.get("/api/presets", response_model=PresetList)
    async def get_presets() -> PresetList:
        return await asyncio.to_thread(store.load)

    return router
