"""What lets the suite run in parallel (pytest-xdist, `make test`): each
worker's folders, keyring and servers are its own, and a test server's
connections answer without Nagle's delay (issue 49)."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import keyring

from tests.keyrings import MemoryKeyring
from tests.listening import listening_socket


def test_each_worker_has_its_own_folders_and_keyring():
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    scratch = Path(os.environ["TANDEM_DB"]).parent
    assert scratch.name.startswith(f"tandem-test-{worker}-")
    for name in ("TANDEM_CACHE_DIR", "HF_HOME"):
        assert Path(os.environ[name]).parent == scratch
    from huggingface_hub import constants

    assert Path(constants.HF_HUB_CACHE).is_relative_to(scratch)  # the Hub cache too
    from app.store.journal import cache_dir

    assert cache_dir().is_relative_to(scratch)  # the disk tier's KV, lane costs, MCP logs
    assert isinstance(keyring.get_keyring(), MemoryKeyring)


def _nodelay_on_accepted(sock: socket.socket) -> int:
    """TCP_NODELAY on the connection an asyncio server (as uvicorn's) accepts from `sock`."""
    async def run() -> int:
        seen = asyncio.get_running_loop().create_future()

        def accepted(reader, writer):
            seen.set_result(writer.get_extra_info("socket").getsockopt(
                socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(accepted, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname())
            value = await asyncio.wait_for(seen, 30)
            writer.close()
            return value

    return asyncio.run(run())


def test_a_test_servers_connections_send_at_once():
    assert _nodelay_on_accepted(listening_socket()) != 0
    plain = socket.socket()  # as the servers were made: asyncio leaves Nagle on
    plain.bind(("127.0.0.1", 0))
    plain.listen()
    assert _nodelay_on_accepted(plain) == 0
