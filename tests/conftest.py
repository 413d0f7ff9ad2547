"""Shared fixtures. The real cascade backend loads once per test session (~10 s from cache)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

pytest_plugins = ("tests.browser",)  # stack / tts / launch fixtures for the browser tests


@pytest.fixture(scope="session")
def cascade_backend():
    from core.processors import create_backend

    backend = create_backend("cascade", {"data_dir": os.environ.get("OMNIDUPLEX_DATA_DIR", "data")})
    backend.load()
    yield backend
    backend.close()
