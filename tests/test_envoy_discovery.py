"""Elastic discovery on the real Envoy: a backend added to the EDS file or to
DNS receives traffic without a restart. Uses the committed cluster fragments."""

import os
from collections import Counter

import yaml
from dnsserver import NAME, naming
from harness import EXAMPLES, sock, front_config, request, start_backends, start_envoy, wait_until


def served_by(listen, n=60):
    return Counter(request(listen, "GET", f"/d/{i}")[1].get("hunt-served-by") for i in range(n))


def with_fragment(cfg, fragment: str, **subst):
    cluster = cfg["static_resources"]["clusters"][0]
    for k in ("type", "load_assignment"):
        cluster.pop(k, None)
    frag = yaml.safe_load((EXAMPLES / fragment).read_text())
    cluster.update(frag)
    return cluster


def write_eds(path, agents):
    doc = yaml.safe_load((EXAMPLES / "backends.eds.yaml").read_text())
    doc["resources"][0]["endpoints"][0]["lb_endpoints"] = [{"endpoint": {"address": sock(a)}} for a in agents]
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        yaml.safe_dump(doc, f)
    os.rename(tmp, path)  # atomic: Envoy sees one complete file


def test_backend_added_to_eds_file_gets_traffic(procs, addrs, tmp_path):
    bs = start_backends(procs, addrs, 3, "always")
    eds = tmp_path / "backends.eds.yaml"
    write_eds(eds, [b.agent for b in bs[:2]])
    host = addrs.host()
    listen, admin = f"{host}:10000", f"{host}:9902"
    cfg = front_config(listen, admin, [])
    cluster = with_fragment(cfg, "discovery-eds.yaml")
    cluster["eds_cluster_config"]["eds_config"]["path_config_source"]["path"] = str(eds)
    start_envoy(procs, "envoy-eds", cfg)
    wait_until(lambda: len(served_by(listen, 20)) == 2, what="two EDS backends serving")
    assert bs[2].id not in served_by(listen)
    write_eds(eds, [b.agent for b in bs])
    wait_until(lambda: bs[2].id in served_by(listen, 30), timeout=10, what="third backend receives traffic")
    # and removal
    write_eds(eds, [b.agent for b in bs[1:]])
    wait_until(lambda: bs[0].id not in served_by(listen, 40), timeout=10, what="removed backend gets no traffic")


def test_backend_added_to_dns_gets_traffic(procs, addrs):
    bs = start_backends(procs, addrs, 3, "always")
    with naming(addrs, [b.host for b in bs[:2]]) as dns:
        host = addrs.host()
        listen, admin = f"{host}:10000", f"{host}:9902"
        cfg = front_config(listen, admin, [])
        cluster = with_fragment(cfg, "discovery-dns.yaml")
        cluster["typed_dns_resolver_config"]["typed_config"]["resolvers"] = [sock(f"{dns.addr[0]}:{dns.addr[1]}")]
        start_envoy(procs, "envoy-dns", cfg)
        wait_until(lambda: len(served_by(listen, 20)) == 2, timeout=10, what="two DNS backends serving")
        assert bs[2].id not in served_by(listen)
        dns.records[NAME] = [b.host for b in bs]
        wait_until(lambda: bs[2].id in served_by(listen, 30), timeout=10, what="third backend receives traffic")
        assert dns.queries >= 2
