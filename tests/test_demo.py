"""The native demo's dashboard (scripts/demo.py): the Prometheus it runs is
PATH's, else the binary `make setup` unpacks from Debian's package into
.cache/prometheus/; started as the demo starts it, that Prometheus serves the
dashboard page and answers every query of its panels. A few seconds."""

from __future__ import annotations

import importlib.util
import json
import time
import urllib.parse
import urllib.request

import pytest

from harness import ROOT, wait_until

spec = importlib.util.spec_from_file_location("demo", ROOT / "scripts" / "demo.py")
demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo)  # a script, not a package; main() only runs as __main__


def test_prometheus_is_paths_else_setups(tmp_path, monkeypatch):
    on_path, local = tmp_path / "bin", tmp_path / "cache" / "prometheus"
    on_path.mkdir()
    local.parent.mkdir()
    monkeypatch.setenv("PATH", str(on_path))
    assert demo.prometheus_binary(local) is None
    local.write_text("#!/bin/sh\n")
    local.chmod(0o755)
    assert demo.prometheus_binary(local) == str(local)
    (on_path / "prometheus").write_text("#!/bin/sh\n")
    (on_path / "prometheus").chmod(0o755)
    assert demo.prometheus_binary(local) == str(on_path / "prometheus")


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.read()


def api(base: str, path: str, **params) -> list:
    status, body = get(f"{base}/api/v1/{path}?{urllib.parse.urlencode(params)}")
    j = json.loads(body)
    assert status == 200 and j["status"] == "success", (path, params, j)
    return j["data"]["result"] if "result" in j["data"] else j["data"]


def test_dashboard_page_and_every_panel_query(procs, addrs, tmp_path):
    if not demo.prometheus_binary():
        pytest.fail("no prometheus on PATH or in .cache/prometheus/: run `make setup`")
    clients = demo.Clients()
    pct = [[50.0, 21000.0], [90.0, 48000.0], [99.0, 95000.0]]
    for front in ("envoy-hunting", "envoy-least-req"):
        clients.add(front, {"targets": ["http://127.0.0.1:1/"] * 4, "completed": 100, "errors": 0, "status": {"200": 100}, "served_by": {"b1": 60, "b2": 40},
                            "latency": {"mean_us": 26000.0, "percentiles": pct}})
    url = demo.start_dashboard(procs, addrs, tmp_path, {"agents": [], "envoy": [], "haproxy": []}, clients)
    assert url.startswith("http://") and url.endswith("/user/index.html"), url
    base = url.removesuffix("/user/index.html")

    # the page and its own files (urllib follows Prometheus' index.html -> ./ redirect)
    status, page = get(url)
    assert status == 200 and b'<script src="dashboard.js">' in page
    for f in ("dashboard.js", "dashboard.css", "panels.json"):
        assert get(f"{base}/user/{f}")[0] == 200, f

    # the load generator's metrics scraped, the compose demo's rules loaded
    wait_until(lambda: api(base, "query", query="huntlb_demo_requests_total"), timeout=20, every=0.5,
               what="huntlb_demo_requests_total scraped")
    groups = api(base, "rules")["groups"]
    assert groups and all(r["health"] != "err" for g in groups for r in g["rules"]), groups

    # every query of every panel, as dashboard.js sends it
    panels = json.loads((ROOT / "compose" / "dashboard" / "panels.json").read_text())["panels"]
    now = time.time()
    with_data = set()
    for p in panels:
        for expr in [q["expr"] for q in p["queries"]] + ([p["max_expr"]] if "max_expr" in p else []):
            if api(base, "query", query=expr):
                with_data.add(expr)
            if p["kind"] == "lines":
                api(base, "query_range", query=expr, start=now - 300, end=now, step=2)
    # the clients' panels have data already; the agents' and proxies' need the demo's load
    assert {e for e in with_data if "huntlb_demo_latency_ms" in e and "0.99" in e} and \
        {e for e in with_data if "huntlb_demo_latency_mean_ms" in e}, with_data


@pytest.mark.slow  # a shortened demo: every strategy's runs, about 33 s
def test_demo_is_paired_and_shows_the_mechanism(tmp_path):
    """`make demo`, shortened: every strategy of one front count met the same
    arrivals and job sizes (the generator's own digest of what it was to send,
    not the demo's word for it), and with several fronts the agents refused or
    forwarded offers; the one-front rows are called a tie by construction.
    Latencies are not asserted: they are what the demo is for."""
    import os
    import signal
    import subprocess
    import sys

    out = tmp_path / "demo.json"
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'bench'}")
    # rho 0.6: a debug build's generator keeps its schedule at that rate
    p = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "demo.py"), "--seconds", "2", "--one-seconds", "1",
                          "--kill-seconds", "2", "--rho", "0.6", "--json", str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        text, _ = p.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)  # benchlib unwinds on SIGTERM: the demo stops what it started
        text, _ = p.communicate(timeout=60)
        pytest.fail(f"the demo took over 240 s:\n{text}")
    assert p.returncode == 0, text
    data = json.loads(out.read_text())
    runs = data["runs"]
    # the kill runs are reported apart, never in a comparison
    assert [(k["proxy"], k["label"]) for k in data["kills"]] == [("envoy", "hunting"), ("haproxy", "hunting")], data["kills"]
    assert text.count("SIGKILLed") == 2, text
    assert {(r["proxy"], r["fronts"]) for r in runs} == {(x, n) for x in ("envoy", "haproxy") for n in (4, 1)}, runs
    for n in (4, 1):
        group = [r for r in runs if r["fronts"] == n]
        assert len(group) == 4, group
        # one schedule (arrivals and job sizes) for the four strategies
        assert len({(r["seed"], r["work"], r["scheduled"], r["schedule_digest"]) for r in group}) == 1, group
        assert all(r["scheduled"] > 0 and r["work"].startswith("exp:") for r in group), group
    # each front count its own schedule
    assert {r["schedule_digest"] for r in runs if r["fronts"] == 4} != {r["schedule_digest"] for r in runs if r["fronts"] == 1}
    for r in runs:
        if r["hunting"] and r["fronts"] == 4:
            assert r["refused"] + r["forwarded"] > 0, r  # the agents corrected the fronts' picks
        if not r["hunting"]:
            assert r["refused"] == r["forwarded"] == 0, r  # no offer, nothing to refuse
    assert "4 fronts: same" in text and "1 front: same" in text, text
    assert text.count("a tie by construction") == 2, text
