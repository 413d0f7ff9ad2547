"""Active health probes for the worker pool.

One probe loop per worker, each sleeping ``interval_s * (1 ± jitter)`` so probes of many
workers do not fire in lockstep. A supervisor loop starts and stops probe loops as workers are
added to or removed from the pool at runtime. Probes use their own ``httpx.AsyncClient`` (never
the relay's), so a saturated relay cannot starve health checks and vice versa, and no lock is
ever held across a probe.

Classification (seeds/002: only transport errors and 408/429/5xx are failures):

- ok: HTTP 200, JSON with ``model_loaded: true`` and ``state != "ERROR"``;
- failure (counts toward ``unhealthy_after`` and ``failures_total``): transport error or
  timeout, HTTP 408/429/>=500, or a loaded worker reporting ``state == "ERROR"``;
- not ready (not ok, not a failure): ``model_loaded: false`` (loading; the body is kept in
  ``last_probe`` so load progress shows in the admin view), other 4xx, or a body that is not a
  JSON object.
"""

from __future__ import annotations

import asyncio
import logging
import random

import httpx

from gateway.pool.interface import SessionQueue
from gateway.pool.model import Worker

log = logging.getLogger(__name__)

_RETRYABLE = {408, 429}


class HealthChecker:
    def __init__(
        self,
        pool: SessionQueue,
        interval_s: float = 2.0,
        timeout_s: float = 2.0,
        jitter: float = 0.2,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.pool = pool
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.jitter = jitter
        self._client = client
        self._own_client = client is None
        self._loops: dict[str, tuple[Worker, asyncio.Task]] = {}
        self._supervisor: asyncio.Task | None = None
        self._tls_client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        if self._supervisor is not None:
            return
        if self._client is None:
            self._client = _plain_client(self.timeout_s)
        self._reconcile()
        self._supervisor = asyncio.create_task(self._supervise(), name="health-supervisor")

    async def stop(self) -> None:
        tasks = [t for _, t in self._loops.values()]
        if self._supervisor is not None:
            tasks.append(self._supervisor)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loops.clear()
        self._supervisor = None
        if self._own_client and self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._tls_client is not None:
            await self._tls_client.aclose()
            self._tls_client = None

    async def probe(self, worker: Worker) -> None:
        """Probe ``GET {url}/health`` once and report the result to the pool."""
        if self._client is None:
            self._client = _plain_client(self.timeout_s)
        client = self._client
        if worker.url.startswith("https:") and self._own_client:
            if self._tls_client is None:  # certificates are checked; loaded only when needed
                self._tls_client = httpx.AsyncClient(timeout=self.timeout_s)
            client = self._tls_client
        ok, failure, info, error = False, True, None, None
        try:
            resp = await client.get(f"{worker.url}/health", timeout=self.timeout_s, headers=self.pool.worker_headers)
        except httpx.HTTPError as e:
            error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        else:
            try:
                body = resp.json()
            except ValueError:
                body = None
            info = body if isinstance(body, dict) else None
            if resp.status_code in _RETRYABLE or resp.status_code >= 500:
                error = f"HTTP {resp.status_code}"
            elif resp.status_code == 401:  # not ours to use: a worker of another deployment, or a wrong secret
                failure, error = False, ("HTTP 401: the worker refused this gateway's worker secret (set the same "
                                         "workers.secret or OMNIDUPLEX_WORKER_SECRET on both)")
            elif resp.status_code != 200:
                failure, error = False, f"HTTP {resp.status_code}"
            elif info is None:
                failure, error = False, "health body is not a JSON object"
            elif info.get("state") == "ERROR":
                error = f"worker state ERROR: {info.get('error') or info.get('load_progress')}"
            elif info.get("model_loaded") is not True:
                failure, error = False, f"not ready (state {info.get('state')})"
            else:
                ok = True
        # The worker may have been removed (or replaced under the same id) while we waited.
        if self.pool.get_worker(worker.id) is worker:
            self.pool.update_health(worker.id, ok, info=info, error=error, failure=failure)

    # ------------------------------------------------------------------ internals

    def _delay(self) -> float:
        return self.interval_s * random.uniform(1 - self.jitter, 1 + self.jitter)

    async def _supervise(self) -> None:
        while True:
            await asyncio.sleep(min(self.interval_s, 1.0))
            self._reconcile()

    def _reconcile(self) -> None:
        """Start loops for new workers, stop loops for removed or replaced ones."""
        current = {w.id: w for w in self.pool.workers()}
        for wid, (worker, task) in list(self._loops.items()):
            if current.get(wid) is not worker or task.done():
                task.cancel()
                del self._loops[wid]
        for wid, worker in current.items():
            if wid not in self._loops:
                task = asyncio.create_task(self._probe_loop(worker), name=f"health-{wid}")
                self._loops[wid] = (worker, task)

    async def _probe_loop(self, worker: Worker) -> None:
        while True:
            try:
                await self.probe(worker)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("health probe of %s failed unexpectedly", worker.id)
            await asyncio.sleep(self._delay())


def _plain_client(timeout_s: float) -> httpx.AsyncClient:
    """For http:// workers: no TLS, so no CA bundle (that costs ~7 MB of gateway memory)."""
    return httpx.AsyncClient(timeout=timeout_s, verify=False, trust_env=False)
