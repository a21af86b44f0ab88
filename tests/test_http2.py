"""HTTP/2 between the Envoy front and the agents (prior knowledge, Envoy's
`http2_protocol_options`), with hunt/1's semantics unchanged; and gRPC through
it to an HTTP/2 app (the agent's `app_protocol = "h2"`), and through the HAProxy
fronts, which speak HTTP/1.1 to the agents."""

import os
import subprocess
import uuid

import pytest
from harness import (FINAL, OFFER, envoy_stats, front_config, path_count, request, start_backends, start_envoy, start_front,
                     wait_envoy_hosts_healthy)
from harness.apps import GrpcEchoApp, start_app_backends
from workload_hash import fnv64


def curl_h2(url: str, *args: str, data: bytes | None = None) -> tuple[int, dict, bytes]:
    out = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-D", "-", "-o", "-", *args, url], input=data,
                         capture_output=True, timeout=30).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    hdrs = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), hdrs, body


def test_agent_speaks_http2_with_prior_knowledge(procs, addrs):
    host = addrs.host()
    _, app = procs.workload(host, demand="const:0")
    _, agent, _ = procs.agent(host, app, policy="static:0")
    hunt = lambda h: [a for k, v in h.items() for a in ("-H", f"{k}: {v}")]  # noqa: E731
    status, h, body = curl_h2(f"http://{agent}/h2/offer", *hunt(OFFER))
    assert (status, h.get("hunt"), body) == (425, "busy", b""), "an offer over HTTP/2 is refused like any other"
    data = os.urandom(3000)
    status, h, body = curl_h2(f"http://{agent}/h2/final", *hunt(FINAL), "--data-binary", "@-", data=data)
    assert status == 200 and f'"fnv64":"{fnv64(data):016x}"'.encode() in body
    assert h.get("hunt-served-by") == f"agent-{host}"


def start_h2_front(procs, addrs, backends):
    host = addrs.host()
    listen, admin = f"{host}:10000", f"{host}:9902"
    start_envoy(procs, f"envoy-{host}", front_config(listen, admin, [b.agent for b in backends], upstream_h2=True))
    wait_envoy_hosts_healthy(admin, len(backends))
    return listen, admin


@pytest.mark.parametrize("policy", ["always", "static:0"])
def test_envoy_front_hunts_over_http2_to_the_agents(procs, addrs, policy):
    bs = start_backends(procs, addrs, 2, policy)
    listen, admin = start_h2_front(procs, addrs, bs)
    refused0 = sum(b.refused() for b in bs)
    for i in range(6):
        body = os.urandom(2000)
        path = f"/h2up/{uuid.uuid4()}"
        status, _, out = request(listen, "POST", path, body=body)
        assert status == 200 and f'"fnv64":"{fnv64(body):016x}"'.encode() in out
        assert path_count(bs, path) == 1
    assert sum(b.refused() for b in bs) - refused0 == (6 if policy == "static:0" else 0)
    s = envoy_stats(admin)
    assert s.get("cluster.backends.upstream_cx_http2_total", 0) > 0 and s.get("cluster.backends.upstream_cx_http1_total", 0) == 0


def offers(bs) -> tuple[float, float, float]:
    """(offers accepted, offers refused, finals) over the agents."""
    ms = [b.metrics() for b in bs]
    return tuple(sum(m[k] for m in ms) for k in ('huntlb_offers_total{decision="accept"}', 'huntlb_offers_total{decision="refuse"}',
                                                   "huntlb_finals_total"))


def stat_delta(admin: str, before: dict, name: str) -> float:
    return envoy_stats(admin).get(f"cluster.backends.{name}", 0) - before.get(f"cluster.backends.{name}", 0)


@pytest.mark.parametrize("policy", ["always", "static:0"])
def test_grpc_unary_through_the_envoy_front(procs, addrs, policy):
    # gRPC calls carry no content-length. The front offers them anyway (its gRPC
    # route) because the agent holds a refusal until the call's body has ended
    # within Envoy's retry buffer: a refused call is re-sent whole, as a final.
    import grpc

    bs = start_app_backends(procs, addrs, 2, policy, GrpcEchoApp, app_protocol="h2")
    listen, admin = start_h2_front(procs, addrs, bs)
    before = envoy_stats(admin)
    with grpc.insecure_channel(listen) as ch:
        say = ch.unary_unary("/huntlb.Echo/Say")
        for i in range(5):
            assert say(b"hi %d" % i, timeout=10) == b"echo:hi %d" % i
            assert sum(b.app_proc.calls for b in bs) == i + 1, "each call reaches an app exactly once"
    refusing = policy == "static:0"
    assert offers(bs) == ((0, 5, 5) if refusing else (5, 0, 0)), "(accepted, refused, finals)"
    assert stat_delta(admin, before, "upstream_rq_retry") == (5 if refusing else 0)
    assert stat_delta(admin, before, "retry_or_shadow_abandoned") == 0


@pytest.mark.parametrize("policy", ["always", "static:0"])
def test_grpc_bodies_that_do_not_fit_the_replay_buffer_are_accepted_once(procs, addrs, policy):
    # Offered like every gRPC call; a body past Envoy's 1 MiB retry buffer
    # (Envoy gives its copy up: retry_or_shadow_abandoned) or still open after
    # the agent's hold is accepted even by an agent that would refuse, so it
    # reaches one app once. A short stream that ends at once is refused and re-sent.
    import hashlib
    import queue
    import time

    import grpc

    bs = start_app_backends(procs, addrs, 2, policy, GrpcEchoApp, app_protocol="h2")
    listen, admin = start_h2_front(procs, addrs, bs)
    at_app = lambda m: sum(b.app_proc.by_method.get(m, 0) for b in bs)  # noqa: E731
    before = envoy_stats(admin)
    opts = [("grpc.max_receive_message_length", 8 << 20), ("grpc.max_send_message_length", 8 << 20)]
    with grpc.insecure_channel(listen, options=opts) as ch:
        collect = ch.stream_unary("/huntlb.Echo/Collect")
        # client streaming, 3 MiB in 48 messages
        msgs = [os.urandom(64 << 10) for _ in range(48)]
        want = b"48 %d %s" % (3 << 20, hashlib.sha256(b"".join(msgs)).hexdigest().encode())
        assert collect(iter(msgs), timeout=30) == want
        assert at_app("Collect") == 1
        # a short client stream that ends at once: fits, so refusable
        msgs = [os.urandom(1000) for _ in range(3)]
        assert collect(iter(msgs), timeout=30) == b"3 3000 %s" % hashlib.sha256(b"".join(msgs)).hexdigest().encode()
        assert at_app("Collect") == 2
        # a unary call of 1.5 MiB
        big = os.urandom(1536 << 10)
        assert ch.unary_unary("/huntlb.Echo/Say")(big, timeout=30) == b"echo:" + big
        assert at_app("Say") == 1
        # bidi, each message answered before the next is sent: the request stays open
        answered = queue.Queue()

        def requests():
            for i in range(3):
                yield b"m%d" % i
                answered.get(timeout=10)

        t0 = time.monotonic()
        got = []
        for r in ch.stream_stream("/huntlb.Echo/Chat")(requests(), timeout=30):
            got.append(r)
            answered.put(None)
        took = time.monotonic() - t0
        assert got == [b"echo:m0", b"echo:m1", b"echo:m2"]
        assert at_app("Chat") == 1
    assert sum(b.app_proc.calls for b in bs) == 4
    refusing = policy == "static:0"
    # static:0: the 3 MiB stream, the 1.5 MiB call and the open stream are
    # accepted (held refusals that could not go), the short stream refused
    assert offers(bs) == ((3, 1, 1) if refusing else (4, 0, 0)), "(accepted, refused, finals)"
    assert stat_delta(admin, before, "upstream_rq_retry") == (1 if refusing else 0)
    assert stat_delta(admin, before, "retry_or_shadow_abandoned") == 2
    if refusing:
        assert took >= 0.1, "the open stream waited out the agent's hold (100 ms) before it was accepted"


@pytest.mark.parametrize("policy", ["always", "static:0"])
@pytest.mark.parametrize("kind", ["haproxy-2.6", "haproxy-3.0"])
def test_grpc_through_the_haproxy_fronts_keeps_its_status(procs, addrs, kind, policy):
    # HAProxy speaks HTTP/1.1 to the agents: a call's status comes back only as
    # chunked trailers, which an HTTP/1.1 server sends only when the response
    # names them (`trailer`). The agent names gRPC's; before, every call ended
    # UNKNOWN ("Stream removed") though it reached its app once.
    import grpc

    bs = start_app_backends(procs, addrs, 2, policy, GrpcEchoApp, app_protocol="h2")
    f = start_front(kind, procs, addrs, bs, warm=False)
    at_app = lambda: sum(b.app_proc.calls for b in bs)  # noqa: E731
    refused0 = sum(b.refused() for b in bs)
    with grpc.insecure_channel(f.listen) as ch:
        say = ch.unary_unary("/huntlb.Echo/Say")
        for i in range(3):
            assert say(b"hi %d" % i, timeout=10) == b"echo:hi %d" % i
            assert at_app() == i + 1, "each call reaches an app exactly once"
        collect = ch.stream_unary("/huntlb.Echo/Collect")
        assert collect(iter([b"a" * 1000, b"b" * 1000]), timeout=10).startswith(b"2 2000 ")
        chat = ch.stream_stream("/huntlb.Echo/Chat")
        assert list(chat(iter([b"x", b"y"]), timeout=10)) == [b"echo:x", b"echo:y"]
        # a status other than OK, after data, reaches the client as the app set it
        replies = []
        with pytest.raises(grpc.RpcError) as e:
            for r in chat(iter([b"x", b"fail"]), timeout=10):
                replies.append(r)
        assert (e.value.code(), e.value.details(), replies) == (grpc.StatusCode.NOT_FOUND, "fail was asked for", [b"echo:x"])
    assert at_app() == 6
    assert sum(b.refused() for b in bs) - refused0 == (6 if policy == "static:0" else 0), "each call refused once, then served"


def test_a_get_with_a_body_of_no_declared_length_reaches_the_app_whole(procs, addrs):
    # HTTP/2 needs no content-length; the agent speaks HTTP/1.1 to the app, where
    # a GET of unknown length went out with no body at all (hyper's default for
    # GET, HEAD and CONNECT), and the app answered 200 to an empty request.
    bs = start_backends(procs, addrs, 2, "always")
    data = os.urandom(5000)
    want = f'"fnv64":"{fnv64(data):016x}"'.encode()
    path = f"/h2get/{uuid.uuid4()}"
    status, _, body = curl_h2(f"http://{bs[0].agent}{path}", "-X", "GET", "-H", "content-length:", "-H", "hunt-offer: 1",
                              "-H", "hunt-target: 1", "--data-binary", "@-", data=data)
    assert status == 200 and want in body, (status, body[:200])
    assert path_count(bs, path) == 1
    # Through the Envoy front with HTTP/2 to the agents: the client's chunked
    # GET reaches the agent as HTTP/2 with no content-length.
    listen, _ = start_h2_front(procs, addrs, bs)
    for _ in range(3):
        path = f"/h2get-front/{uuid.uuid4()}"
        out = subprocess.run(["curl", "-sS", "-X", "GET", "-H", "transfer-encoding: chunked", "--data-binary", "@-",
                              f"http://{listen}{path}"], input=data, capture_output=True, timeout=30).stdout
        assert want in out, out[:200]
        assert path_count(bs, path) == 1
