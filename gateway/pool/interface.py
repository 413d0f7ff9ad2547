"""SessionQueue: what the gateway asks of its worker pool, whichever implementation it is.

Two implementations, neither a subclass of the other, chosen by ``factory.make_pool``:
``WorkerPool`` (``worker_pool.py``, in this process) and ``SharedPool`` (``shared_pool.py``,
the queue and leases in Redis, shared by several gateways). Both keep the same FIFO rule,
held to one behaviour by one table of cases (``tests/e2e/test_queue_cases.py``): dispatch walks
the queue in order and gives each entry the least loaded, least over-qualified free worker that
meets its requirements; an entry is skipped only when no free worker can serve it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gateway.pool.model import Lease, QueueStatus, Worker


class SessionQueue(Protocol):
    capacity: int
    max_wait_s: float
    healthy_after: int
    avg_session_s: float  # learned session length behind ETAs
    eta_session_s: float | None  # the operator's fixed one, if set
    gateway_id: str | None  # set where several gateways share the queue
    remote_sessions: list[dict]  # other gateways' live sessions (shared queue only)
    local_sessions: Callable[[], list[dict]]  # set by the app: this gateway's live sessions
    end_local: Callable[[str, str], bool]  # set by the app: end a session here (ticket, reason)
    on_adopted: Callable[[str], None]  # set by ResumableSessions: another gateway took over this ticket's lease
    worker_headers: dict[str, str]  # what every call to a worker carries

    # ---- life cycle
    async def start(self) -> None: ...
    async def close(self) -> None: ...
    def cluster_health(self) -> dict | None: ...
    async def flush(self) -> None:
        """Wait until this gateway's writes so far have reached the shared state and the view
        of it is fresh (in memory: nothing to wait for)."""
        ...

    # ---- sessions
    async def acquire(self, requirements: frozenset[str] = frozenset(), ticket: str | None = None,
                      on_status: Callable[[QueueStatus], None] | None = None,
                      on_assigned: Callable[[Lease], None] | None = None) -> Lease:
        """A slot, waiting in the FIFO when none is free. Raises NoCapableWorkerError,
        QueueFullError, QueueTimeoutError (QueueCancelledError when the operator removed it)."""
        ...

    def release(self, lease: Lease, *, record: bool = True) -> None: ...
    def cancel(self, ticket: str, reason: str = ...) -> bool:
        """A request waiting on this gateway leaves the queue; its acquire raises QueueCancelledError."""
        ...

    @property
    def queue_length(self) -> int: ...

    # ---- resumable sessions (issue 72): brought back through any gateway that shares the queue
    async def share_resumable(self, lease: Lease, digest: str, session_id: str, owner: str | None,
                              grace_s: float) -> None: ...
    async def adopt_resumable(self, digest: str, owner: str | None) -> tuple[Lease, str] | str | None:
        """(lease, session id) taken over from another gateway; ``invalid`` / ``expired``; None
        where no other gateway shares the queue."""
        ...

    # ---- workers and health (probes, and sessions that saw a worker fail)
    def workers(self) -> list[Worker]: ...
    def get_worker(self, worker_id: str) -> Worker | None: ...
    def update_health(self, worker_id: str, ok: bool, info: dict | None = None, error: str | None = None,
                      *, failure: bool = True) -> None: ...
    def report_failure(self, worker_id: str, reason: str) -> None: ...

    # ---- operator actions (the admin API): on every gateway that shares the queue
    async def admin_add_worker(self, url: str, worker_id: str | None = None, slots: int = 1) -> Worker: ...
    async def admin_remove_worker(self, worker_id: str) -> None: ...
    async def admin_set_disabled(self, worker_id: str, disabled: bool) -> None: ...
    async def admin_mark_dead(self, worker_id: str) -> None: ...
    async def admin_cancel(self, ticket: str, reason: str = ...) -> bool: ...
    async def admin_end_remote(self, session: str, reason: str) -> dict | None: ...
    async def admin_set_eta(self, seconds: float | None) -> None: ...
    def set_eta_session_s(self, seconds: float | None) -> None: ...

    # ---- introspection
    def snapshot(self, with_queue: bool = True) -> dict: ...
