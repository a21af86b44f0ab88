"""HTTP/2 between the Envoy front and the agents (prior knowledge, Envoy's
`http2_protocol_options`), with hunt/1's semantics unchanged; and gRPC through
it to an HTTP/2 app (the agent's `app_protocol = "h2"`)."""

import os
import subprocess
import uuid

import pytest
from harness import (FINAL, OFFER, envoy_stats, front_config, path_count, request, start_backends, start_envoy,
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


@pytest.mark.parametrize("policy", ["always", "static:0"])
def test_grpc_unary_through_the_envoy_front(procs, addrs, policy):
    # gRPC calls carry no content-length, so under hunt/1's rule the front cannot
    # know they fit its copy: they go to one backend as finals (protocol.md § 1).
    import grpc

    bs = start_app_backends(procs, addrs, 2, policy, GrpcEchoApp, app_protocol="h2")
    listen, _ = start_h2_front(procs, addrs, bs)
    with grpc.insecure_channel(listen) as ch:
        say = ch.unary_unary("/huntlb.Echo/Say")
        for i in range(5):
            assert say(b"hi %d" % i, timeout=10) == b"echo:hi %d" % i
    assert sum(b.app_proc.calls for b in bs) == 5
    assert sum(b.refused() for b in bs) == 0
