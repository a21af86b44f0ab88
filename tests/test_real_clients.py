"""Real clients through every hunting front, in the accept path (agents with
`always`) and the refuse-then-final path (`static:0`: every offer refused, the
final served by the other backend), counting what reached the apps.

Other real-client cases live beside the behaviour they test: chunked uploads
and HTTP/1.0 in test_fronts.py, many headers and slowloris in test_agent.py
and test_fronts.py."""

import re
import socket
import time

import pytest
from harness import FRONTS, request, start_front
from harness.apps import SseApp, WsEchoApp, start_app_backends

PATHS = {"accept": "always", "refuse-then-final": "static:0"}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", FRONTS)
def test_websocket_echo(procs, addrs, kind, path):
    # The handshake is a GET without a body: offered, maybe refused, then the
    # final's app answers 101 and the agent joins the two connections.
    from websockets.sync.client import connect

    bs = start_app_backends(procs, addrs, 2, PATHS[path], WsEchoApp)
    f = start_front(kind, procs, addrs, bs)
    refused0 = sum(b.refused() for b in bs)
    for i in range(3):
        with connect(f"ws://{f.listen}/ws/{i}", open_timeout=10, close_timeout=5) as ws:
            for j in range(3):
                ws.send(f"hello {i}.{j}")
                assert ws.recv(timeout=10) == f"hello {i}.{j}"
    assert sum(b.app_proc.handshakes for b in bs) == 3, "each handshake reached exactly one app, once"
    assert sum(b.refused() for b in bs) - refused0 == (3 if path == "refuse-then-final" else 0)
    # an upgraded session holds no in-flight slot: the agents are idle again
    assert all(b.metrics()["huntlb_inflight"] == 0 for b in bs)


def read_events(addr: str, n: int, every_ms: int, timeout: float = 10) -> tuple[int, list[float]]:
    """GET /events over HTTP/1.1: the status and each event's delay (arrival
    minus the time the app wrote it, both this process's monotonic clock)."""
    host, port = addr.rsplit(":", 1)
    delays, buf, status = [], b"", None
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(f"GET /events?n={n}&every_ms={every_ms} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n".encode())
        deadline = time.monotonic() + timeout
        while len(delays) < n and time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                break
            now = time.monotonic()
            buf += chunk
            if status is None and b"\r\n" in buf:
                status = int(buf.split(b" ", 2)[1])
            for m in re.finditer(rb"data: (\d+\.\d+)\n", buf):
                delays.append(now - float(m.group(1)))
            buf = buf[buf.rfind(b"\n\n") + 2:] if b"\n\n" in buf else buf
    return status, delays


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", FRONTS)
def test_server_sent_events_arrive_as_written(procs, addrs, kind, path):
    # A streamed response must not be held back: HAProxy without
    # `option http-no-delay` delayed each event ~0.21 s for HTTP/1.1 clients.
    bs = start_app_backends(procs, addrs, 2, PATHS[path], SseApp)
    f = start_front(kind, procs, addrs, bs)
    status, delays = read_events(f.listen, n=6, every_ms=150)
    assert status == 200 and len(delays) == 6, (status, delays)
    assert sum(b.app_proc.streams for b in bs) == 1
    # 150 ms apart, so a held-back event shows as a delay near 0.2 s; on loopback
    # an event passes three processes in a few milliseconds
    assert max(delays) < 0.1, [round(d, 3) for d in delays]
    assert request(f.listen, "GET", "/after")[0] == 200
