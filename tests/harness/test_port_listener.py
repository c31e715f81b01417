"""A server is ready only when /health answers from its own listener: a port handed out
free can be bound by another program's server first, which answers /health too, while
ours exits with "address already in use" (``server_pool.ServerProcess.wait_ready``).
Real processes on 127.0.0.1: a foreign HTTP server in this process, ours a child."""
from __future__ import annotations

import asyncio
import http.server
import socket
import sys
import textwrap
import threading

import pytest

from harness.serve.client import EngineClient
from harness.server_pool import BootFailure, ServerProcess, holds_listener
from harness.serve.slots import Slot


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):   # noqa: N802 - http.server's name
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):   # quiet
        pass


@pytest.fixture
def foreign_server():
    """Another program's server: /health 200 on a port of its own."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


# a server that binds its port (argv[1]) and answers /health, or says the port is taken
_OURS = textwrap.dedent("""
    import http.server, sys
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def log_message(self, *a):
            pass
    try:
        srv = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
    except OSError as e:
        print(f"ERROR: [Errno {e.errno}] error while attempting to bind: address already in use")
        sys.exit(1)
    srv.serve_forever()
""")


def _server(tmp_path, port: int) -> ServerProcess:
    return ServerProcess([sys.executable, "-c", _OURS, str(port)], {}, port,
                         tmp_path / "server.log", Slot("cpu0"))


async def _wait(server: ServerProcess, timeout: float = 20.0) -> float:
    server.start()
    client = EngineClient(server.base_url, timeout=5.0)
    try:
        return await server.wait_ready(client, timeout)
    finally:
        await client.aclose()
        await server.stop()


def test_a_foreign_server_on_the_port_is_not_ours_and_ours_fails_to_boot(tmp_path,
                                                                           foreign_server):
    with pytest.raises(BootFailure) as e:
        asyncio.run(_wait(_server(tmp_path, foreign_server)))
    assert e.value.port_conflict   # retried on another port, never measured on the foreign one


def test_our_own_listener_is_ready(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert asyncio.run(_wait(_server(tmp_path, port))) > 0


def test_the_listener_check_tells_the_holder(foreign_server):
    import os
    assert holds_listener(os.getpid(), foreign_server)
    child = __import__("subprocess").Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not holds_listener(child.pid, foreign_server)
    finally:
        child.kill()
        child.wait()
