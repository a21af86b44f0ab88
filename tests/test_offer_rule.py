"""Each shipped front offers exactly the requests `protocol::offerable` says it
should (policy/vectors/offer.json): agents refuse every offer (static:0), so a
request was offered iff one agent counted a refusal for it. Every request is
processed once, intact."""

import http.client
import json
import os
import uuid

import pytest
from harness import FRONTS, ROOT, path_count, start_backends, start_front
from workload_hash import fnv64

VECTORS = json.loads((ROOT / "policy" / "vectors" / "offer.json").read_text())


@pytest.mark.parametrize("kind", FRONTS)
def test_front_offers_what_the_rule_says(procs, addrs, kind):
    cases = VECTORS["fronts"][kind.split("-")[0]]["requests"]
    bs = start_backends(procs, addrs, 2, "static:0")
    f = start_front(kind, procs, addrs, bs)
    host, port = f.listen.rsplit(":", 1)
    wrong = []
    for case in cases:
        size = case.get("length", case.get("chunked"))
        body = os.urandom(size) if size else b""
        path = f"/offer/{uuid.uuid4()}"
        before = sum(b.refused() for b in bs)
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            if "chunked" in case:
                conn.request(case["method"], path, body=(body[i:i + 4096] for i in range(0, size, 4096)), encode_chunked=True)
            elif "length" in case:
                conn.request(case["method"], path, body=body)  # http.client sends content-length
            else:
                conn.request(case["method"], path)
            resp = conn.getresponse()
            out = resp.read()
        finally:
            conn.close()
        assert resp.status == 200, (case, resp.status, out[:200])
        if size:
            assert f'"fnv64":"{fnv64(body):016x}"'.encode() in out, case
        assert path_count(bs, path) == 1, case
        offered = sum(b.refused() for b in bs) - before == 1
        if offered != case["offered"]:
            wrong.append((case, offered))
    assert wrong == [], f"{kind} offered differently from the rule: {wrong}"
