"""Operator settings that change at runtime and survive a restart: app toggles and the ETA.

Kept in ``<data_dir>/operator.json`` (written atomically). A missing or invalid file means
defaults (every app on, learned ETA); an invalid one is logged with the reason, never fatal.

Apps are what a user can open: the three pages and ``api`` (every other realtime client, and
the REST API; ``app_of``). A disabled app's page says so, and the gateway refuses its new
sessions (``app_disabled``, close 1008; REST: 403); sessions already running go on.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import HTTPConnection

from core.files import atomic_write_bytes
from gateway.access.policy import same_origin

log = logging.getLogger(__name__)

SETTINGS_FILE = "operator.json"


class AppInfo(BaseModel):
    id: str
    name: str
    page: str | None = None
    enabled: bool = True


APPS: tuple[AppInfo, ...] = (
    AppInfo(id="chat", name="Chat", page="/turnbased.html"),
    AppInfo(id="audio_duplex", name="Audio duplex", page="/audio_duplex.html"),
    AppInfo(id="omni", name="Omni (camera)", page="/omni.html"),
    AppInfo(id="api", name="API clients (/v1 without a page)"),
)
APP_IDS = tuple(a.id for a in APPS)


def app_of(conn: HTTPConnection) -> str:
    """The app a session counts as for the operator's toggles. The page its ``?app=`` names only
    when one of our own pages opened it (``Origin`` is this gateway's, which a page on another
    site cannot forge; ``static/shared/app-gate.js`` adds the query); anything else is ``api``:
    a client that sends no Origin, another site's page, whatever ``?app=`` says. (A non-browser
    client could claim our Origin: it then does what our page would, nothing more.)"""
    label = conn.query_params.get("app")
    return label if label in APP_IDS and label != "api" and same_origin(conn) else "api"


class OperatorSettings(BaseModel):
    model_config = ConfigDict(extra="ignore")

    disabled_apps: list[str] = Field(default_factory=list)
    eta_session_s: float | None = Field(
        None, ge=1, le=86400, description="fixed session length for queue ETAs; None = learned average")


class SettingsStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / SETTINGS_FILE
        self.settings = self._load()

    def _load(self) -> OperatorSettings:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            settings = OperatorSettings.model_validate(data)
            settings.disabled_apps = [a for a in settings.disabled_apps if a in APP_IDS]
            return settings
        except FileNotFoundError:
            return OperatorSettings()
        except (OSError, ValueError, ValidationError) as exc:
            log.error("ignoring %s (using defaults): %s", self.path, exc)
            return OperatorSettings()

    def save(self) -> None:
        """Blocking (a small atomic write); call it in a thread."""
        atomic_write_bytes(self.path, self.settings.model_dump_json(indent=1).encode())

    def enabled(self, app_id: str) -> bool:
        return app_id not in self.settings.disabled_apps

    def set_enabled(self, app_id: str, enabled: bool) -> None:
        if app_id not in APP_IDS:
            raise KeyError(app_id)
        disabled = [a for a in self.settings.disabled_apps if a != app_id]
        if not enabled:
            disabled.append(app_id)
        self.settings.disabled_apps = disabled

    def apps(self) -> list[AppInfo]:
        return [a.model_copy(update={"enabled": self.enabled(a.id)}) for a in APPS]
