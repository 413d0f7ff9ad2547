"""What the admin API reports, as JSON: workers (with the sessions they run, here or on another
gateway), the queue, the live sessions and the ETA settings. Read-only views of the pool and the
gateway's live sessions; the routes (``workers_api.py``, ``queue_api.py``, ``settings_api.py``,
``routes.py``'s overview) only choose which to show."""

from __future__ import annotations

import time
from typing import Any

from starlette.datastructures import State

from gateway.pool.interface import SessionQueue


class AdminViews:
    def __init__(self, state: State) -> None:
        self.state = state
        self.pool: SessionQueue = state.pool

    def worker(self, w) -> dict[str, Any]:
        pool = self.pool
        probe = w.last_probe or {}
        now = time.monotonic()
        by_ticket = self.state.live
        remote = {s["ticket"]: s for s in pool.remote_sessions} | {s["ticket"]: {**s, "gateway": pool.gateway_id}
                                                                   for s in self._held()}
        sessions = []
        for ticket, since in w.sessions.items():
            proxy = by_ticket.get(ticket)
            if proxy is not None:
                sessions.append({"ticket": ticket, "session_id": proxy.session_id, "app": proxy.app_name,
                                 "running_s": round(now - since, 1), "gateway": pool.gateway_id})
            else:
                other = remote.get(ticket, {})
                sessions.append({"ticket": ticket, "session_id": other.get("session_id"),
                                 "app": other.get("app", "rest"), "running_s": round(now - since, 1),
                                 "gateway": other.get("gateway", pool.gateway_id)})
        return {
            "id": w.id, "url": w.url, "health": w.health.value, "available": w.available,
            "state": probe.get("state"), "load_progress": probe.get("load_progress"),
            "backend": probe.get("backend"), "uptime_s": probe.get("uptime_s"),
            "slots": w.slots, "busy": w.busy, "sessions": sessions,
            "capabilities": sorted(w.capabilities), "failures_total": w.failures_total,
            "fail_streak": w.fail_streak, "ok_streak": w.ok_streak, "last_error": w.last_error,
            "added_at": w.added_at,
        }

    def queue(self) -> list[dict[str, Any]]:
        pool = self.pool
        snap = pool.snapshot()["queue"]
        remote = {s["ticket"]: s for s in pool.remote_sessions}
        for entry in snap:
            proxy = self.state.live.get(entry["ticket"])
            other = remote.get(entry["ticket"], {})
            entry["app"] = proxy.app_name if proxy else other.get("app", "rest")
            entry["client"] = proxy.client_ip if proxy else other.get("client")
            entry.setdefault("gateway", pool.gateway_id)
        return snap

    def live(self) -> list[dict[str, Any]]:
        """This gateway's sessions, then those other gateways list in the shared state."""
        now = time.time()
        out = []
        for proxy in list(self.state.live.values()):
            info = proxy.info()
            info["age_s"] = round(now - info["created_at"], 1)
            info["gateway"] = self.pool.gateway_id
            out.append(info)
        for info in self._held():  # dropped connections whose session waits for its token (their slot is taken)
            out.append({**info, "age_s": round(now - info["created_at"], 1), "gateway": self.pool.gateway_id})
        for info in self.pool.remote_sessions:
            out.append({**info, "age_s": round(now - (info.get("created_at") or now), 1)})
        return out

    def _held(self) -> list[dict[str, Any]]:
        resumes = getattr(self.state, "resumes", None)
        return resumes.held() if resumes is not None else []

    def eta(self) -> dict[str, Any]:
        return {"session_s": self.pool.eta_session_s, "learned_avg_s": round(self.pool.avg_session_s, 1),
                "default_session_s": self.state.config.queue.default_session_s}
