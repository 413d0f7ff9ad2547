"""Giving a worker's socket up when the client left (``proxy.close_worker(abandon=True)``) never
fails because the worker closed it first (found by the Live fuzz: ``setsockopt`` on a socket whose
file descriptor was gone raised EBADF into the gateway's session task)."""

from __future__ import annotations

import socket

from gateway.realtime.proxy import close_worker


class TransportDouble:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.aborted = False

    def get_extra_info(self, name: str):
        return self.sock if name == "socket" else None

    def abort(self) -> None:
        self.aborted = True


class ConnectionDouble:
    def __init__(self, transport: TransportDouble) -> None:
        self.transport = transport


async def test_abandoning_a_socket_the_worker_already_closed_is_quiet():
    sock = socket.socket()
    sock.close()  # its descriptor is gone: setsockopt raises EBADF
    conn = ConnectionDouble(TransportDouble(sock))
    await close_worker(conn, abandon=True)
    assert conn.transport.aborted
