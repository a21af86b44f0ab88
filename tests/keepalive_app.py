"""A WSGI app that counts arrivals per path, served by gunicorn in the
keep-alive tests (tests/test_keepalive.py): `GET /stats` answers the counts as
JSON. One worker process, so one count."""

import json
import threading

_lock = threading.Lock()
_paths: dict[str, int] = {}


def app(environ, start_response):
    path = environ.get("PATH_INFO", "/")
    body = environ["wsgi.input"].read()
    if path == "/stats":
        with _lock:
            out = json.dumps({"paths": dict(_paths)}).encode()
    else:
        with _lock:
            _paths[path] = _paths.get(path, 0) + 1
        out = json.dumps({"path": path, "len": len(body)}).encode()
    start_response("200 OK", [("content-type", "application/json"), ("content-length", str(len(out)))])
    return [out]
