"""The model's threads, owned by the runtime rather than by each backend.

The runtime (the worker, or ``create_backend`` for a caller that gives none) makes one
``ModelThreads`` and hands it to the backend it builds; the backend names the threads it needs
(``threads.pool("llm")``: a pool whose threads carry that name), and ``close`` shuts them all down
after the backend is closed. One thread per model stage keeps a stage's work in order and lets
stages overlap with each other, never with themselves.
"""

from __future__ import annotations

import concurrent.futures
import threading


class ModelThreads:
    def __init__(self) -> None:
        self._pools: dict[str, concurrent.futures.ThreadPoolExecutor] = {}
        self._serial: set[str] = set()  # pools of one thread: their work runs in order
        self._lock = threading.Lock()
        self._closed = False

    def pool(self, name: str, workers: int = 1) -> concurrent.futures.ThreadPoolExecutor:
        """The pool called ``name`` (its threads are ``name_0``, ...), made on first use."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the model threads are closed")
            pool = self._pools.get(name)
            if pool is None:
                pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix=name)
                self._pools[name] = pool
                if workers == 1:
                    self._serial.add(name)
            return pool

    def barrier(self) -> list[concurrent.futures.Future]:
        """A no-op queued on every one-thread pool: when they are all done, everything queued
        there before this call has run (a cancelled reply's last step included)."""
        with self._lock:
            pools = [p for n, p in self._pools.items() if n in self._serial] if not self._closed else []
        futures = []
        for pool in pools:
            try:
                futures.append(pool.submit(_nothing))
            except RuntimeError:  # shut down meanwhile
                pass
        return futures

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._pools)

    def close(self) -> None:
        """Stop every pool: queued work is dropped, running work finishes on its own."""
        with self._lock:
            self._closed = True
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)


def _nothing() -> None:
    pass
