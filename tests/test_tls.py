"""TLS and mTLS from the front to the agent (docs/agent.md, "TLS from the fronts":
only the fronts reach an agent's port): real agents
with a server certificate that require a client certificate from the test's CA
(`tls_cert`, `tls_key`, `tls_client_ca`), behind real Envoy 1.40 (an
UpstreamTlsContext transport socket) and real HAProxy 2.6 and 3.0 (`ssl verify
required`), as docs/envoy.md and docs/haproxy.md configure them. A throwaway CA,
server and client certificates are made per test with the openssl CLI.

Only a holder of a client certificate from the CA reaches the agent: a client
without one, or with one from another CA, is refused at the handshake and never
reaches the app, so the hunt headers the agent reads come from a front."""

from __future__ import annotations

import http.client
import random
import re
import shutil
import socket
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness import (FINAL, OFFER, Front, app_stats, binary, each_refused_once_then_served_elsewhere, envoy_stats, front_config, haproxy_front_text,
                     haproxy_server_states, HaproxyRoot, metrics, path_count,
                     request, start_backends, start_envoy, start_haproxy, wait_envoy_hosts_healthy, wait_runtime, wait_until)

FRONTS = ["envoy", "envoy-h2", "haproxy-2.6", "haproxy-3.0"]
NAME = "huntlb-agent"  # the agents' certificate name (DNS SAN), checked by both fronts

OPENSSL_CNF = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:huntlb-agent,IP:127.0.0.1
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
[peer]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = DNS:huntlb-agent
"""


@dataclass
class Pki:
    ca: Path            # the CA the agents trust for clients and the fronts trust for agents
    agent_crt: Path
    agent_key: Path
    front_crt: Path     # the fronts' client certificate (signed by ca)
    front_key: Path
    front_pem: Path     # the same, certificate then key, for HAProxy's `crt`
    rogue_crt: Path     # a client certificate from another CA
    rogue_key: Path
    rogue_pem: Path

    def agent_opts(self) -> dict:
        return {"tls_cert": self.agent_crt, "tls_key": self.agent_key, "tls_client_ca": self.ca}


def _openssl(*args, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _ca(d: Path, name: str) -> tuple[Path, Path]:
    _openssl("req", "-x509", "-config", "openssl.cnf", "-extensions", "ca", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN={name}", cwd=d)
    return d / f"{name}.crt", d / f"{name}.key"


def _leaf(d: Path, name: str, ca: str, ext: str) -> tuple[Path, Path]:
    _openssl("req", "-new", "-config", "openssl.cnf", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-set_serial", str(random.getrandbits(63)),
             "-days", "2", "-extfile", "openssl.cnf", "-extensions", ext, "-out", f"{name}.crt", cwd=d)
    return d / f"{name}.crt", d / f"{name}.key"


@pytest.fixture
def pki(tmp_path) -> Pki:
    if shutil.which("openssl") is None:
        pytest.fail("the openssl CLI is not installed: run `make setup`")
    d = tmp_path / "pki"
    d.mkdir()
    (d / "openssl.cnf").write_text(OPENSSL_CNF)
    ca, _ = _ca(d, "ca")
    _ca(d, "other-ca")
    agent_crt, agent_key = _leaf(d, NAME, "ca", "server")
    front_crt, front_key = _leaf(d, "front", "ca", "client")
    rogue_crt, rogue_key = _leaf(d, "rogue", "other-ca", "client")
    front_pem = d / "front.pem"
    front_pem.write_bytes(front_crt.read_bytes() + front_key.read_bytes())
    rogue_pem = d / "rogue.pem"
    rogue_pem.write_bytes(rogue_crt.read_bytes() + rogue_key.read_bytes())
    return Pki(ca, agent_crt, agent_key, front_crt, front_key, front_pem, rogue_crt, rogue_key, rogue_pem)


def envoy_tls_socket(pki: Pki) -> dict:
    """The cluster transport socket of docs/envoy.md (TLS to agents with mTLS)."""
    return {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "sni": NAME,
            "common_tls_context": {
                "tls_certificates": [{"certificate_chain": {"filename": str(pki.front_crt)},
                                      "private_key": {"filename": str(pki.front_key)}}],
                "validation_context": {
                    "trusted_ca": {"filename": str(pki.ca)},
                    "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": NAME}}],
                },
            },
        },
    }


def haproxy_tls_opts(pki: Pki) -> str:
    """The default-server options of docs/haproxy.md (TLS to agents with mTLS)."""
    return f"ssl verify required ca-file {pki.ca} crt {pki.front_pem} sni str({NAME}) verifyhost {NAME} check-sni {NAME}"


def start_tls_front(kind: str, procs, addrs, backends, pki: Pki, ready: bool = True) -> Front:
    """The shipped hunting front of `kind` with TLS (and a client certificate) to
    the agents, returned once every backend passed its health checks (over TLS).
    ready=False: returned once the proxy runs, checks passed or not."""
    host = addrs.host()
    listen = f"{host}:10000"
    if kind.startswith("envoy"):
        admin = f"{host}:9902"
        cfg = front_config(listen, admin, [b.agent for b in backends], upstream_h2=kind == "envoy-h2")
        cfg["static_resources"]["clusters"][0]["transport_socket"] = envoy_tls_socket(pki)
        start_envoy(procs, f"envoy-{host}", cfg)
        if ready:
            wait_envoy_hosts_healthy(admin, len(backends))
            wait_until(lambda: all(request(listen, "GET", "/warmup")[0] == 200 for _ in range(2)), what="front serving")
        return Front(kind, listen, backends, envoy_admin=admin)
    hr = HaproxyRoot(kind.split("-")[1])
    procs.cleanups.append(hr.cleanup)
    stats = str(hr.dir / f"{host}.sock")
    text = haproxy_front_text(hr, listen, stats, backends)
    text, n = re.subn(r"^(\s*)(default-server .*)$", rf"\1\2\n\1default-server {haproxy_tls_opts(pki)}", text, count=1, flags=re.M)
    assert n == 1, "the shipped front.cfg has no default-server line"
    wait_runtime(stats, start_haproxy(procs, hr, f"haproxy-{host}", text))
    if ready:
        wait_until(lambda: all(s == "UP" for s in haproxy_server_states(stats).values()), timeout=15, what="servers UP over TLS")
        wait_until(lambda: request(listen, "GET", "/warmup")[0] == 200, what="front serving")
    return Front(kind, listen, backends, stats=stats, hr=hr)


@pytest.fixture(params=FRONTS)
def tls_front(request, procs, addrs, pki):
    return lambda backends: start_tls_front(request.param, procs, addrs, backends, pki)


def offers(bs, decision: str) -> float:
    return sum(b.metrics()[f'huntlb_offers_total{{decision="{decision}"}}'] for b in bs)


def seen(admin: str) -> float:
    """Requests the agent read: offers, finals, plain, malformed and health checks."""
    kinds = ("huntlb_offers_total", "huntlb_finals_total", "huntlb_plain_total", "huntlb_malformed_total", "huntlb_health_checks_total")
    return sum(v for k, v in metrics(admin).items() if k.startswith(kinds))


def handshake_failures(agent_proc) -> int:
    """Handshakes the agent ended (it logs each one)."""
    return Path(agent_proc.log_path).read_text(errors="replace").count("TLS handshake failed")


def test_accept_path_through_the_front_over_mtls(procs, addrs, pki, tls_front):
    bs = start_backends(procs, addrs, 3, "always", agent_opts=pki.agent_opts())
    f = tls_front(bs)
    ids = {b.id for b in bs}
    accepted0, refused0 = offers(bs, "accept"), offers(bs, "refuse")
    n = 30
    for i in range(n):
        path = f"/tls/accept/{i}"
        status, h, _ = request(f.listen, "GET", path)
        assert status == 200
        assert h["hunt-served-by"] in ids
        assert path_count(bs, path) == 1
    assert offers(bs, "accept") - accepted0 == n
    assert offers(bs, "refuse") - refused0 == 0
    assert sum(handshake_failures(b.agent_proc) for b in bs) == 0
    if f.envoy_admin:
        # Envoy's own count: its connections to the agents were TLS (and h2 when asked)
        s = envoy_stats(f.envoy_admin)
        assert s["cluster.backends.ssl.handshake"] > 0 and s.get("cluster.backends.ssl.connection_error", 0) == 0
        assert (s["cluster.backends.upstream_cx_http2_total"] > 0) == (f.kind == "envoy-h2")


def test_refused_offer_then_final_through_the_front_over_mtls(procs, addrs, pki, tls_front):
    # static:0 refuses every offer: each request is refused once, over TLS, and
    # served by the other agent as the final; the app sees it exactly once.
    bs = start_backends(procs, addrs, 2, "static:0", agent_opts=pki.agent_opts())
    f = tls_front(bs)
    finals0 = sum(b.metrics()["huntlb_finals_total"] for b in bs)
    refused0 = {b.id: b.refused() for b in bs}
    n = 20
    each_refused_once_then_served_elsewhere(f.listen, bs, n, "/tls/refuse")
    assert sum(b.refused() - refused0[b.id] for b in bs) == n
    assert sum(b.metrics()["huntlb_finals_total"] for b in bs) - finals0 == n
    assert offers(bs, "accept") == 0
    assert f.leftover_refusals() == 0


@pytest.mark.parametrize("kind", ["envoy", "haproxy-2.6", "haproxy-3.0"])
def test_a_front_with_another_cas_certificate_never_reaches_the_apps(procs, addrs, pki, kind):
    # A proxy set up like the front but holding a certificate from another CA:
    # every handshake to the agents fails (its health checks included), so its
    # requests get the proxy's own 503 and no app sees them.
    bs = start_backends(procs, addrs, 2, "always", agent_opts=pki.agent_opts())
    rogue = Pki(**{**pki.__dict__, "front_crt": pki.rogue_crt, "front_key": pki.rogue_key, "front_pem": pki.rogue_pem})
    f = start_tls_front(kind, procs, addrs, bs, rogue, ready=False)
    wait_until(lambda: sum(handshake_failures(b.agent_proc) for b in bs) >= 4, timeout=15, what="health checks refused")
    for i in range(5):
        assert request(f.listen, "GET", f"/rogue/{i}")[0] == 503
    assert f.up() == set()
    assert sum(path_count(bs, f"/rogue/{i}") for i in range(5)) == 0
    assert sum(seen(b.admin) for b in bs) == 0
    print(f"{kind}: {sum(handshake_failures(b.agent_proc) for b in bs)} handshakes refused, 0 requests reached the agents")


def client_context(pki: Pki, cert: tuple[Path, Path] | None, alpn=("http/1.1",), tls12: bool = False) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(pki.ca)
    if cert:
        ctx.load_cert_chain(*cert)
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(list(alpn))
    return ctx


def tls_request(addr: str, ctx: ssl.SSLContext, path: str, headers: dict | None = None):
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=10)
    conn.sock = ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=10), server_hostname=NAME)
    try:
        return request(addr, "GET", path, headers=headers, conn=conn)
    finally:
        conn.close()


def refused_at_handshake(addr: str, ctx: ssl.SSLContext, path: str) -> str:
    """A request that must get no HTTP answer: the agent ends the handshake.
    Returns how the client saw it end."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname=NAME) as s:
                # TLS 1.3: the client's side of the handshake is done before the
                # server has checked its certificate; the alert comes next
                s.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nhunt-offer: 1\r\nhunt-target: 2\r\n\r\n".encode())
                data = s.recv(65536)
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError) as e:
            return f"{type(e).__name__}: {e}"
    assert data == b"", f"an HTTP answer came through: {data[:80]!r}"
    return "closed"


def test_direct_clients_without_the_front_certificate_never_reach_the_app(procs, addrs, pki):
    host = addrs.host()
    _, app = procs.workload(host, demand="const:0")
    p, agent, admin = procs.agent(host, app, policy="always", **pki.agent_opts())
    front = (pki.front_crt, pki.front_key)

    # the front's certificate gets in, over HTTP/1.1 (and the health path answers over TLS)
    assert tls_request(agent, client_context(pki, front), "/.hunt/health")[0] == 200
    status, h, _ = tls_request(agent, client_context(pki, front), "/direct/front", headers=FINAL)
    assert status == 200 and h["hunt-served-by"] == f"agent-{host}"
    base = seen(admin)
    cases = {
        "no certificate, TLS 1.3": client_context(pki, None),
        "no certificate, TLS 1.2": client_context(pki, None, tls12=True),
        "another CA's certificate, TLS 1.3": client_context(pki, (pki.rogue_crt, pki.rogue_key)),
        "another CA's certificate, TLS 1.2": client_context(pki, (pki.rogue_crt, pki.rogue_key), tls12=True),
    }
    ends = {}
    for i, (what, ctx) in enumerate(cases.items()):
        ends[what] = refused_at_handshake(agent, ctx, f"/direct/rogue/{i}")
    print("how each client saw its handshake end:", ends)
    # plaintext HTTP to the TLS port: no HTTP answer either
    with socket.create_connection(agent.rsplit(":", 1), timeout=5) as s:
        s.sendall(b"GET /direct/plain HTTP/1.1\r\nhost: x\r\nhunt-offer: 1\r\nhunt-target: 2\r\n\r\n")
        try:
            data = s.recv(65536)
        except ConnectionResetError:
            data = b""
        assert not data.startswith(b"HTTP/"), data[:80]
    wait_until(lambda: handshake_failures(p) >= len(cases) + 1, timeout=5, what="handshake failures logged")
    assert handshake_failures(p) == len(cases) + 1
    assert metrics(admin)["huntlb_tls_handshake_failures_total"] == len(cases) + 1
    stats = app_stats(app)["paths"]
    assert [k for k in stats if k.startswith("/direct/")] == ["/direct/front"]
    assert seen(admin) == base
    # and the agent still serves the front afterwards
    assert tls_request(agent, client_context(pki, front), "/direct/after", headers=OFFER)[0] == 200


def test_alpn_h2_and_http11(procs, addrs, pki):
    host = addrs.host()
    _, app = procs.workload(host, demand="const:0")
    _, agent, _ = procs.agent(host, app, policy="always", **pki.agent_opts())
    front = (pki.front_crt, pki.front_key)
    h, port = agent.rsplit(":", 1)
    for offered, chosen in ((["h2", "http/1.1"], "h2"), (["http/1.1"], "http/1.1")):
        ctx = client_context(pki, front, alpn=offered)
        with ctx.wrap_socket(socket.create_connection((h, int(port)), timeout=5), server_hostname=NAME) as s:
            assert s.selected_alpn_protocol() == chosen
            if chosen == "h2":
                # the client preface and an empty SETTINGS: the server answers with its SETTINGS frame
                s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
                head = s.recv(9)
                assert len(head) == 9 and head[3] == 0x04, head
    status, _, _ = tls_request(agent, client_context(pki, front), "/alpn/h1", headers=FINAL)
    assert status == 200


def test_a_flood_of_failed_handshakes_is_counted_not_logged_line_by_line(procs, addrs, pki):
    """A scanner (or a front with the wrong certificate) fails a handshake per
    connection: the metric counts each, the log has at most 10 lines per 10 s."""
    host = addrs.host()
    _, app = procs.workload(host, demand="const:0")
    p, agent, admin = procs.agent(host, app, policy="always", **pki.agent_opts())
    h, port = agent.rsplit(":", 1)
    for i in range(25):
        with socket.create_connection((h, int(port)), timeout=5) as s:
            s.sendall(f"GET /flood/{i} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
            try:
                s.recv(100)
            except (ConnectionResetError, socket.timeout):
                pass
    wait_until(lambda: metrics(admin)["huntlb_tls_handshake_failures_total"] == 25, timeout=10, what="25 failures counted")
    assert handshake_failures(p) == 10
    assert not [k for k in app_stats(app)["paths"] if k.startswith("/flood/")]
    # and the front still gets in
    assert tls_request(agent, client_context(pki, (pki.front_crt, pki.front_key)), "/flood/front", headers=FINAL)[0] == 200


def test_a_rotated_certificate_is_taken_without_a_restart(procs, addrs, pki, tmp_path):
    """Certificates are replaced in place (cert-manager, a Kubernetes secret's
    rename): new connections get the new one within the agent's reload period
    (2 s), a connection made before keeps working, and files that do not load
    leave the certificate in use, with an error naming the key."""
    live = tmp_path / "live"
    live.mkdir()
    crt, key = live / "tls.crt", live / "tls.key"
    shutil.copy(pki.agent_crt, crt)
    shutil.copy(pki.agent_key, key)
    host = addrs.host()
    _, app = procs.workload(host, demand="const:0")
    p, agent, _ = procs.agent(host, app, policy="always", tls_cert=crt, tls_key=key, tls_client_ca=pki.ca)
    ctx = client_context(pki, (pki.front_crt, pki.front_key))
    h, port = agent.rsplit(":", 1)

    def der(path: Path) -> bytes:
        return ssl.PEM_cert_to_DER_cert(path.read_text())

    def served() -> bytes:
        with ctx.wrap_socket(socket.create_connection((h, int(port)), timeout=5), server_hostname=NAME) as s:
            return s.getpeercert(binary_form=True)

    def replace(path: Path, data: bytes) -> None:
        tmp = path.with_suffix(".new")
        tmp.write_bytes(data)
        tmp.replace(path)

    assert served() == der(pki.agent_crt)
    before = http.client.HTTPSConnection(h, int(port), context=ctx, timeout=10)
    before.sock = ctx.wrap_socket(socket.create_connection((h, int(port)), timeout=10), server_hostname=NAME)
    assert request(agent, "GET", "/rotate/before", headers=FINAL, conn=before)[0] == 200
    new_crt, new_key = _leaf(pki.ca.parent, "rotated", "ca", "server")
    replace(crt, new_crt.read_bytes())  # the certificate first: with the old key it does not load yet
    replace(key, new_key.read_bytes())
    wait_until(lambda: served() == der(new_crt), timeout=15, what="the rotated certificate on new connections")
    # the connection made before keeps its certificate and its keep-alive
    assert before.sock.getpeercert(binary_form=True) == der(pki.agent_crt)
    assert request(agent, "GET", "/rotate/open", headers=FINAL, conn=before)[0] == 200
    before.close()
    # a key that does not load: the rotated certificate stays, and the log says why
    replace(key, b"-----BEGIN NONSENSE-----\nnot a key\n")
    log = Path(p.log_path)
    wait_until(lambda: "do not load" in log.read_text(errors="replace"), timeout=15, what="the bad key reported")
    assert "tls_key" in next(line for line in log.read_text(errors="replace").splitlines() if "do not load" in line)
    assert served() == der(new_crt)
    assert tls_request(agent, ctx, "/rotate/after", headers=FINAL)[0] == 200
    paths = app_stats(app)["paths"]
    assert {k: v for k, v in paths.items() if k.startswith("/rotate/")} == {"/rotate/before": 1, "/rotate/open": 1, "/rotate/after": 1}


@pytest.mark.parametrize("which,key", [("cert-missing", "tls_cert"), ("cert-junk", "tls_cert"), ("key-missing", "tls_key"),
                                       ("key-junk", "tls_key"), ("key-mismatch", "tls_key"), ("ca-junk", "tls_client_ca"),
                                       ("cert-only", "tls_key")])
def test_bad_tls_files_fail_at_start_naming_the_key(procs, addrs, pki, tmp_path, which, key):
    junk = tmp_path / "junk.pem"
    junk.write_text("-----BEGIN NONSENSE-----\nnot base64 at all\n")
    missing = tmp_path / "nowhere.pem"
    opts = pki.agent_opts()
    if which == "cert-missing":
        opts["tls_cert"] = missing
    elif which == "cert-junk":
        opts["tls_cert"] = junk
    elif which == "key-missing":
        opts["tls_key"] = missing
    elif which == "key-junk":
        opts["tls_key"] = junk
    elif which == "key-mismatch":
        opts["tls_key"] = pki.front_key
    elif which == "ca-junk":
        opts["tls_client_ca"] = junk
    elif which == "cert-only":
        del opts["tls_key"]
    host = addrs.host()
    argv = [binary("huntlb-agent"), "--listen", f"{host}:8080", "--admin", f"{host}:9901", "--app", f"{host}:9000"]
    for k, v in opts.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    p = procs.start(f"agent-{which}", argv)
    assert p.wait(10) == 2
    log = Path(p.log_path).read_text()
    assert f"config key `{key}`" in log, log


def test_forwards_between_agents_use_mtls(procs, addrs, pki):
    # With TLS on the agents, the tier forwards over TLS too, presenting the
    # agent's own certificate (server and client use) and checking the peer's
    # for fleet_tls_name: a peer with mTLS takes nothing else, and requests
    # never cross between backends in clear. Before, fleet_listen refused to
    # start beside tls_cert.
    import threading
    import uuid
    from harness import path_count, start_fleet
    peer_crt, peer_key = _leaf(pki.ca.parent, "peer", "ca", "peer")
    opts = {"tls_cert": peer_crt, "tls_key": peer_key, "tls_client_ca": pki.ca, "fleet_tls_name": NAME,
            "fleet_heartbeat_ms": 1000, "fleet_dead_after_ms": 5000}
    a, b = bs = start_fleet(procs, addrs, 2, agent_opts=opts, wanting=False)
    front = (pki.front_crt, pki.front_key)
    held = [threading.Thread(target=tls_request, args=(a.agent, client_context(pki, front), f"/hold/{i}?work_ms=4000"),
                             kwargs={"headers": FINAL}, daemon=True) for i in range(2)]
    for t in held:
        t.start()
    wait_until(lambda: a.metrics()["huntlb_inflight"] == 2, what="two requests working at a")
    for _ in range(5):
        path = f"/fwd-tls/{uuid.uuid4()}"
        status, h, _ = tls_request(a.agent, client_context(pki, front), path, headers=OFFER)
        assert status == 200 and h["hunt-served-by"] == b.id, (status, h)
        assert path_count(bs, path) == 1 and app_stats(b.app)["paths"].get(path) == 1
    m = a.metrics()
    assert m['huntlb_forwards_total{outcome="sent"}'] == 5 and m['huntlb_forwards_total{outcome="unreachable"}'] == 0
    assert handshake_failures(b.agent_proc) == 0
