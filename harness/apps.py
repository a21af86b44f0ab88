"""Small real apps for the real-client tests, where the workload app has no
such endpoint: a WebSocket echo server (the `websockets` library) and a
server-sent-events stream. Each runs in a thread on its own loopback address,
counts what arrives, and is closed by the test's cleanups."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness.hunters import Backend
from harness.procs import Addrs, Procs


class _Served:
    """A server object with serve_forever()/shutdown(), run in a daemon thread."""

    def _serve(self, server):
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def close(self):
        self._server.shutdown()
        if hasattr(self._server, "server_close"):
            self._server.server_close()
        self._thread.join(timeout=5)


class WsEchoApp(_Served):
    """Echoes every WebSocket message; any other request gets 200 `ok`.
    `handshakes` counts the upgrade requests that reached the app."""

    def __init__(self, host: str, port: int = 9000):
        from websockets.sync.server import serve

        self.addr = f"{host}:{port}"
        self.handshakes = 0
        self._lock = threading.Lock()

        def process_request(conn, request):
            if request.headers.get("Upgrade", "").lower() != "websocket":
                return conn.respond(200, "ok\n")
            with self._lock:
                self.handshakes += 1
            return None

        def echo(ws):
            for msg in ws:
                ws.send(msg)

        self._serve(serve(echo, host, port, process_request=process_request))


class SseApp(_Served):
    """GET /events?n=N&every_ms=T streams N events T ms apart (chunked, as
    server-sent events are); each event's data is the monotonic time it was
    written, so a client in the same process measures each event's delay."""

    def __init__(self, host: str, port: int = 9000):
        app = self
        self.addr = f"{host}:{port}"
        self.streams = 0

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                if not self.path.startswith("/events"):
                    self._send(b"ok\n")
                    return
                q = dict(kv.split("=") for kv in self.path.partition("?")[2].split("&") if "=" in kv)
                n, every = min(int(q.get("n", 5)), 100), min(int(q.get("every_ms", 100)), 2000) / 1000
                app.streams += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for _ in range(n):
                    time.sleep(every)
                    event = f"data: {time.monotonic():.6f}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _send(self, body: bytes):
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = ThreadingHTTPServer((host, port), Handler)
        server.daemon_threads = True
        self._serve(server)


class GrpcEchoApp:
    """A gRPC server (grpcio, HTTP/2) with raw-bytes methods: unary
    /huntlb.Echo/Say answers `echo:` + the request; client-streaming
    /huntlb.Echo/Collect answers `<messages> <bytes> <sha256>` of what it read;
    bidi /huntlb.Echo/Chat answers `echo:` + each message as it comes, and ends
    the call NOT_FOUND at a message `fail` (a status in trailers, after data). `calls`
    counts calls that reached it, `by_method` per method."""

    def __init__(self, host: str, port: int = 9000):
        from concurrent import futures

        import grpc

        import hashlib
        import threading

        self.addr = f"{host}:{port}"
        self.calls = 0
        self.by_method: dict[str, int] = {}
        lock = threading.Lock()

        def arrived(method: str):
            with lock:
                self.calls += 1
                self.by_method[method] = self.by_method.get(method, 0) + 1

        def say(request, context):
            arrived("Say")
            return b"echo:" + request

        def collect(requests, context):
            arrived("Collect")
            n, size, h = 0, 0, hashlib.sha256()
            for m in requests:
                n, size = n + 1, size + len(m)
                h.update(m)
            return b"%d %d %s" % (n, size, h.hexdigest().encode())

        def chat(requests, context):
            arrived("Chat")
            for m in requests:
                if m == b"fail":
                    context.abort(grpc.StatusCode.NOT_FOUND, "fail was asked for")
                yield b"echo:" + m

        opts = [("grpc.max_receive_message_length", 8 << 20), ("grpc.max_send_message_length", 8 << 20)]
        self._server = grpc.server(futures.ThreadPoolExecutor(8), options=opts)
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("huntlb.Echo", {
            "Say": grpc.unary_unary_rpc_method_handler(say),
            "Collect": grpc.stream_unary_rpc_method_handler(collect),
            "Chat": grpc.stream_stream_rpc_method_handler(chat),
        }),))
        self._server.add_insecure_port(self.addr)
        self._server.start()

    def alive(self) -> bool:
        return True

    def close(self):
        self._server.stop(0)


def start_app_backends(procs: Procs, addrs: Addrs, n: int, policy: str, app_class, **agent_opts) -> list[Backend]:
    """n apps of `app_class`, each behind an agent; `.app_proc` is the app object."""
    out = []
    for _ in range(n):
        host = addrs.host()
        app = app_class(host)
        procs.cleanups.append(app.close)
        agent_proc, agent, admin = procs.agent(host, app.addr, policy=policy, **agent_opts)
        out.append(Backend(host, app.addr, agent, admin, app, agent_proc))
    return out


class ShortKeepAliveApp(_Served):
    """An HTTP/1.1 app that closes a keep-alive connection idle for `idle_s`
    (Python's http.server: the handler's socket timeout), as gunicorn, Node
    and Apache do after theirs. `paths` counts arrivals."""

    def __init__(self, host: str, idle_s: float, port: int = 9000):
        self.addr = f"{host}:{port}"
        self.paths: dict[str, int] = {}
        lock = threading.Lock()
        paths = self.paths

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = idle_s

            def _answer(self):
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n) if n else b""
                with lock:
                    paths[self.path] = paths.get(self.path, 0) + 1
                out = f'{{"path": "{self.path}", "len": {len(body)}}}'.encode()
                self.send_response(200)
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer((host, port), Handler)
        server.daemon_threads = True
        self._serve(server)
