"""Each shipped front offers exactly the requests `protocol::offerable` says it
should (policy/vectors/offer.json): agents refuse every offer they may
(static:0), so a request was offered iff one agent counted an offer for it (a
refusal, or a held refusal it had to turn into an accept: `held_refusal`).
Every request is processed once, intact."""

import http.client
import json
import os
import uuid

import pytest
from harness import FRONTS, ROOT, path_count, start_backends, start_front
from workload_hash import fnv64

VECTORS = json.loads((ROOT / "policy" / "vectors" / "offer.json").read_text())


def offers(b) -> float:
    m = b.metrics()
    return m['huntlb_offers_total{decision="accept"}'] + m['huntlb_offers_total{decision="refuse"}']


@pytest.mark.parametrize("kind", FRONTS)
def test_front_offers_what_the_rule_says(procs, addrs, kind):
    front = VECTORS["fronts"][kind.split("-")[0]]
    cases, limit = front["requests"], front["limit"]
    bs = start_backends(procs, addrs, 2, "static:0")
    f = start_front(kind, procs, addrs, bs)
    host, port = f.listen.rsplit(":", 1)
    wrong = []
    for case in cases:
        size = case.get("length", case.get("chunked", case.get("grpc")))
        body = os.urandom(size) if size else b""
        path = f"/offer/{uuid.uuid4()}"
        before = sum(offers(b) for b in bs)
        refused0 = sum(b.refused() for b in bs)
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            if "chunked" in case or "grpc" in case:
                # "grpc": a body of no length with gRPC's content-type, which is
                # what the Envoy front's gRPC route looks at
                headers = {"content-type": "application/grpc"} if "grpc" in case else {}
                conn.request(case["method"], path, body=(body[i:i + 4096] for i in range(0, size, 4096)), headers=headers,
                             encode_chunked=True)
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
        offered = sum(offers(b) for b in bs) - before == 1
        # a held refusal goes only if the body ended within the front's copy;
        # past it the offer is accepted (every other offer here is refused)
        refused = sum(b.refused() for b in bs) - refused0 == 1
        assert refused == (offered and not (case["sees"] == "held" and size > limit)), case
        if offered != case["offered"]:
            wrong.append((case, offered))
    assert wrong == [], f"{kind} offered differently from the rule: {wrong}"
