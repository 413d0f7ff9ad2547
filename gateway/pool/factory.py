"""The gateway's worker pool (``SessionQueue``): in-process (``WorkerPool``), or shared with
other gateways through Redis (``SharedPool``)."""

from __future__ import annotations

import socket

from core.config import AppConfig
from gateway.pool.interface import SessionQueue
from gateway.pool.worker_pool import WorkerPool


def make_pool(config: AppConfig) -> SessionQueue:
    """The in-process pool, or with ``cluster.redis_url`` the one shared through Redis."""
    settings = {"capacity": config.queue.capacity, "max_wait_s": config.queue.max_wait_s,
                "default_session_s": config.queue.default_session_s,
                "healthy_after": config.health.healthy_after, "unhealthy_after": config.health.unhealthy_after}
    url = config.cluster.resolved_url()
    if url is None:
        pool = WorkerPool(**settings)
        for worker_url in config.worker_urls():
            pool.add_worker(worker_url, slots=config.workers.slots)
        return pool
    from gateway.pool.shared_pool import SharedPool  # redis-py only when clustered

    gateway_id = config.cluster.gateway_id or f"{socket.gethostname()}-{config.gateway.port}"
    pool = SharedPool(url, prefix=config.cluster.prefix, lease_ttl_s=config.cluster.lease_ttl_s,
                      gateway_id=gateway_id.replace(" ", "_")[:40], **settings)
    pool.configure_workers(config.worker_urls(), config.workers.slots)
    return pool
