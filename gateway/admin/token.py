"""The admin token: from config, or generated once into ``<data_dir>/admin_token`` (mode 0600).

Recordings and admin routes accept it as ``Authorization: Bearer <token>`` or ``?token=``;
compared in constant time.
"""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

from core.config import AppConfig
from core.files import atomic_write_bytes

log = logging.getLogger(__name__)


def load_admin_token(config: AppConfig) -> str:
    if config.admin.token:
        return config.admin.token
    path = Path(config.data_dir) / "admin_token"
    try:
        token = path.read_text().strip()
        if len(token) >= 16:
            return token
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(24)
    atomic_write_bytes(path, token.encode(), mode=0o600)
    # Printed once, at creation; afterwards it is only in the file.
    print(f"Admin token (saved in {path}): {token}", flush=True)
    return token
