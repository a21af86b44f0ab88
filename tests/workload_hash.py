"""The workload app's body hash (FNV-1a 64), to check bodies arrive intact."""

import os
import uuid

from harness import path_count, request


def fnv64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def post_once(listen: str, backends: list, size: int) -> int:
    """A POST of `size` random bytes through the front at `listen`, asserted
    served (200), its body intact at the app (length and hash) and processed
    at exactly one of `backends`; returns how many offers they refused on its
    way (the front replays a refused one)."""
    refused0 = sum(b.refused() for b in backends)
    body = os.urandom(size)
    path = f"/post/{uuid.uuid4()}"
    status, _, data = request(listen, "POST", path, body=body)
    assert status == 200, data[:200]
    assert f'"len":{size}' in data.decode() and f'"fnv64":"{fnv64(body):016x}"' in data.decode()
    assert path_count(backends, path) == 1
    return sum(b.refused() for b in backends) - refused0
