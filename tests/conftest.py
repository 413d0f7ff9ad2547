"""Shared fixtures. The real cascade backend loads once per test session (~10 s from cache)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

pytest_plugins = ("tests.support.browser",)  # tts / launch fixtures for the browser tests

TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The folder is the marker: ``-m unit`` runs tests/unit/, ``-m e2e`` tests/e2e/."""
    for item in items:
        folder = Path(str(item.fspath)).resolve().relative_to(TESTS).parts[0]
        if folder in ("unit", "e2e"):
            item.add_marker(getattr(pytest.mark, folder))


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    """One default stack (one cascade worker) for every module that needs nothing else; a module
    that does defines its own ``stack``. Each start costs ~11 s of the suite. A test that changes
    it puts it back (the admin page's drain enables the worker again; the worker-failure test
    starts the killed worker again and waits for it), and tests find their sessions by id."""
    from tests.support.stack import Stack

    s = Stack(tmp_path_factory.mktemp("shared_stack"), workers=1).start()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def cascade_backend():
    from core.processors import create_backend

    backend = create_backend("cascade", {"data_dir": os.environ.get("OMNIDUPLEX_DATA_DIR", "data")})
    backend.load()
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """A real Debian ``redis-server`` for one test module (the cluster's queue, keys and calls)."""
    if shutil.which("redis-server") is None:
        pytest.skip("Debian redis-server not installed")
    from launcher.redis_server import redis_server

    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url
