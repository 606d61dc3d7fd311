"""A listening socket for a test's server, on a free port the kernel picks."""

from __future__ import annotations

import socket


def listening_socket(backlog: int = 128) -> socket.socket:
    """Bound to a free port of 127.0.0.1 and listening, so a client may connect
    at once (it waits in the backlog until the server accepts) and no other
    process (another pytest-xdist worker) can take the port first. Made as a
    TCP socket by name (IPPROTO_TCP, not 0): asyncio then turns Nagle off on
    the connections a server (uvicorn's `sockets=`) accepts from it, as it does
    on uvicorn's own sockets; without that, each request on a kept-alive
    connection waited ~40 ms for a delayed ACK."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(backlog)
    return sock
