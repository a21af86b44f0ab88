"""What an operator monitors (docs/metrics.md): the metric reference is the
agents' own list, the shipped rules pass promtool and their unit tests, the
compose demo loads them, the dashboard's every query is drawn, and the scaling
signal, one recording rule, rises with load under tier fronts.

Real agents (every option that adds metrics), real HAProxy tier fronts, a real
Prometheus evaluating the shipped rules file."""

import json
import re
import shutil
import subprocess
import sys
import threading
import time
import tomllib
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from harness import ROOT, closed_loop, request, start_fleet, start_front, wait_http, wait_until
from harness.testbed import peers_of, tier_opts
from test_llm_kv import servers as llm_servers

sys.path.insert(0, str(ROOT / "scripts"))
import dashboard_preview  # noqa: E402
import metrics_doc  # noqa: E402

MONITORING = ROOT / "packaging" / "monitoring"
RULES = MONITORING / "huntlb-alerts.yml"
CACHE = ROOT / ".cache" / "prometheus"


def tool(name: str) -> str:
    """Prometheus' binaries: PATH's, else those make setup unpacks into .cache/prometheus/."""
    found = shutil.which(name) or (str(CACHE / name) if (CACHE / name).exists() else None)
    if not found:
        pytest.fail(f"no {name} on PATH or in .cache/prometheus/: run make setup (it unpacks Debian's prometheus package)")
    return found


def exported(admin: str) -> dict[str, str]:
    """The metric names an agent's /metrics declares, with their types."""
    _, _, body = request(admin, "GET", "/metrics")
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", body.decode(), re.M))


# --- the metric reference ---------------------------------------------------

def test_the_metric_reference_is_generated_from_the_table():
    assert subprocess.run([sys.executable, str(ROOT / "scripts" / "metrics_doc.py"), "--check"]).returncode == 0
    table = [m["name"] for m in metrics_doc.rows()]
    assert metrics_doc.documented((ROOT / "docs" / "metrics.md").read_text()) == table
    # the other docs point at it and keep no list of their own to drift
    for doc, head, end in (("agent.md", "## Metrics\n", "\n## "), ("protocol.md", "## 8. Metrics\n", "\n## 8a.")):
        section = (ROOT / "docs" / doc).read_text().split(head, 1)[1].split(end, 1)[0]
        assert "metrics.md" in section, doc
        # protocol's names one metric, to show how the Wasm sidecar folds labels into names
        listed = {n for n in re.findall(r"`(huntlb_[a-z_]+)", section) if n in table}
        assert len(listed) <= 1, f"docs/{doc} {head.strip()} lists metrics again ({sorted(listed)}): link docs/metrics.md instead"


class _ApacheStatus(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"BusyWorkers: 1\nIdleWorkers: 3\n"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_the_agents_export_exactly_the_documented_metrics(procs, addrs):
    """Both ways: every name the agents export is in docs/metrics.md with its
    type, and every documented name is exported by an agent with the options
    it needs (a forwarding tier, an LLM server's KV read and prefix affinity,
    Apache's status page)."""
    doc = {m["name"]: m["kind"] for m in metrics_doc.rows()}
    assert list(doc) == metrics_doc.documented((ROOT / "docs" / "metrics.md").read_text())
    llm = llm_servers(procs, addrs, 2, kv=True)
    host = addrs.host()
    status_page = ThreadingHTTPServer((host, 8081), _ApacheStatus)
    threading.Thread(target=status_page.serve_forever, daemon=True).start()
    procs.cleanups.append(status_page.shutdown)
    _, _, apache_admin = procs.agent(host, f"{host}:8081", load="apache", workers=4, policy="static:2",
                                     apache_status_url=f"http://{host}:8081/server-status?auto", apache_poll_ms=20)
    # prefix affinity (load = llm, its peers the servers' agents, which do not list it): an app that is no model server does for the names
    prefix_host = addrs.host()
    _, prefix_app = procs.workload(prefix_host)
    tier = tier_opts(prefix_host, peers_of([prefix_host, *(b.host for b in llm)]), procs.fleet_key())
    _, _, prefix_admin = procs.agent(prefix_host, prefix_app, load="llm", workers=4, llm_prefix_bytes=64, **tier)
    seen: dict[str, str] = {}
    for admin in [b.admin for b in llm] + [apache_admin, prefix_admin]:
        seen |= exported(admin)
    assert set(seen) - set(doc) == set(), "exported but not in docs/metrics.md"
    assert set(doc) - set(seen) == set(), "in docs/metrics.md but exported by no agent"
    assert {n: seen[n] for n in doc} == doc, "types differ"
    # the version label is the workspace's, and the histogram reaches past app_timeout_ms (55 s)
    version = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["version"]
    _, _, body = request(apache_admin, "GET", "/metrics")
    text = body.decode()
    assert f'huntlb_build_info{{version="{version}"}} 1' in text
    bounds = [float(b) for b in re.findall(r'huntlb_request_duration_seconds_bucket\{le="([0-9.e+-]+)"\}', text)]
    assert max(bounds) >= 60 > 55


def test_a_member_that_never_answers_is_counted_unheard(procs, addrs):
    """huntlb_fleet_peers_unheard, which HuntlbFleetPeersUnheard reads: a
    member in fleet_peers with no agent is counted by every agent once drawn,
    and stays counted; the live members, drawn in and out of small samples 8
    times a second, are never counted (each answers within a round trip).
    Quiet agents (no offer decides by counts) draw once a quiet beat, one
    member anew: at 125 ms here, so that each draws the absent member within
    the wait (at the default 1 s, about 14 draws in 15 s, each a 1-in-4
    chance, an agent would miss it now and then)."""
    absent = addrs.host()
    bs = start_fleet(procs, addrs, 5, absent=[absent], wanting=False,
                     agent_opts={"fleet_sample": 2, "fleet_sample_keep": 1, "fleet_quiet_beat_ms": 125})
    assert all(b.metrics()["huntlb_fleet_members"] == 5 for b in bs)
    wait_until(lambda: all(b.metrics()["huntlb_fleet_peers_unheard"] == 1 for b in bs), timeout=15,
               what="every agent counting the member that never answers")
    readings = []
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        readings.append([b.metrics()["huntlb_fleet_peers_unheard"] for b in bs])
        time.sleep(0.05)
    assert all(r == [1] * 5 for r in readings), [r for r in readings if r != [1] * 5][:5]


# --- the rules and the dashboard -----------------------------------------------

def test_the_shipped_rules_pass_promtool_and_their_unit_tests():
    promtool = tool("promtool")
    check = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    tests = ROOT / "tests" / "monitoring" / "huntlb-alerts.test.yml"
    run = subprocess.run([promtool, "test", "rules", tests.name], cwd=tests.parent, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    # every alert the file ships has a unit test that expects it to fire, and tells the operator what to do
    shipped = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]
    spec = yaml.safe_load(tests.read_text())
    fired = {a["alertname"] for t in spec["tests"] for a in t.get("alert_rule_test", []) if a.get("exp_alerts")}
    for r in shipped:
        assert r["for"] and r["labels"]["severity"] in ("critical", "warning", "info"), r["alert"]
        assert len(r["annotations"]["description"]) > 60, r["alert"]
    untested = {r["alert"] for r in shipped} - fired
    assert not untested, untested


def test_the_compose_demo_loads_the_shipped_rules():
    cfg = yaml.safe_load((ROOT / "compose" / "config" / "prometheus.yml").read_text())
    assert "/etc/prometheus/huntlb-alerts.yml" in cfg["rule_files"]
    docker = (ROOT / "compose" / "images" / "prometheus" / "Dockerfile").read_text()
    assert "dist/huntlb-alerts.yml" in docker
    assert "packaging/monitoring/huntlb-alerts.yml" in (ROOT / "compose" / "build.sh").read_text()
    # the shipped signal is not written again in the demo's rules; the demo's scaler reads its own
    # (hunting fronts' tries only: the demo's agents serve plain fronts too, rules file)
    demo_rules = yaml.safe_load((ROOT / "compose" / "config" / "huntlb.rules.yml").read_text())
    records = [r.get("record") for g in demo_rules["groups"] for r in g["rules"]]
    assert "huntlb:scaling_signal:ratio" not in records and "huntlb:finals_busy:ratio" in records
    assert 'SIGNAL = "huntlb:finals_busy:ratio"' in (ROOT / "compose" / "scaler.py").read_text()


def test_the_doc_quotes_the_recording_rule():
    rule = next(r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if r.get("record") == "huntlb:scaling_signal:ratio")
    doc = (ROOT / "docs" / "metrics.md").read_text()
    assert rule["expr"].strip() in doc
    assert "finals_busy_total" not in (ROOT / "docs" / "agent.md").read_text().split("## Timeouts")[0].split("## Metrics")[1]


def test_the_dashboard_has_variables_and_every_panel_is_drawn():
    g = json.loads((MONITORING / "huntlb-dashboard.json").read_text())
    assert {v["name"] for v in g["templating"]["list"]} >= {"datasource", "job", "namespace", "instance"}
    drawn = dashboard_preview.panels(g)
    graphs = [p for p in g["panels"] if p["type"] != "row"]
    assert len(drawn["panels"]) == len(graphs)
    for p in graphs:
        for t in p["targets"]:
            if "huntlb:" not in t["expr"]:
                # every query is held to the fleet the variables choose
                assert 'job=~"$job"' in t["expr"] and 'instance=~"$instance"' in t["expr"], (p["title"], t["expr"])
    exprs = " ".join(q["expr"] for p in drawn["panels"] for q in p["queries"])
    for name in ("huntlb_fleet_peers_unheard", "huntlb_fleet_reports_bad_total", "huntlb_app_stalled", "huntlb_connections_max",
                 "huntlb_build_info", "huntlb_forwards_total", "huntlb_request_duration_seconds_bucket", "huntlb:scaling_signal:ratio"):
        assert name in exprs, name
    documented = set(metrics_doc.documented((ROOT / "docs" / "metrics.md").read_text()))
    used = {re.sub(r"_(bucket|sum|count)$", "", n) for n in re.findall(r"\bhuntlb_[a-z_]+", exprs)}
    assert used <= documented, used - documented


# --- the scaling signal ----------------------------------------------------------

def start_prometheus(procs, tmp_path, host: str, targets: list[str]) -> str:
    """A real Prometheus over `targets` with the shipped rules, scraping and
    evaluating every second."""
    cfg = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "rule_files": [str(RULES)],
           "scrape_configs": [{"job_name": "huntlb", "static_configs": [{"targets": targets}]}]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    addr = f"{host}:9090"
    p = procs.start("prometheus", [tool("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
                                   f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address={addr}"])
    wait_http(addr, "/-/ready", proc=p, timeout=30, want=200)
    return addr


def instant(prom: str, expr: str, at: float) -> list:
    q = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    with urllib.request.urlopen(f"http://{prom}/api/v1/query?{q}", timeout=10) as r:
        out = json.load(r)
    assert out["status"] == "success", out
    return out["data"]["result"]


def drive(front: str, clients: int, seconds: float) -> int:
    """`clients` sending one request at a time each for `seconds`; returns how many were not 200."""
    return sum(n for status, n in closed_loop([front], clients, seconds, "/signal", timeout=10).items() if status != 200)


def test_the_scaling_signal_rises_with_load_under_tier_fronts(procs, addrs, tmp_path):
    """Three agents in a tier (4 workers, c = 2) behind two HAProxy tier
    fronts, which send no offers: the signal, the shipped recording rule's
    expression evaluated by Prometheus over each phase, is near 0 with one
    request at a time and high with twelve."""
    rule = next(r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if r.get("record") == "huntlb:scaling_signal:ratio")
    assert rule["expr"].count("[1m]") == 4
    bs = start_fleet(procs, addrs, 3, policy="static:2", app_opts={"workers": 4, "demand": "const:40", "cores": 4},
                     agent_opts={"workers": 4}, wanting=False)
    fronts = [start_front("haproxy-2.6", procs, addrs, bs, example="front-tier.cfg", source=True) for _ in range(2)]
    prom = start_prometheus(procs, tmp_path, addrs.host(), [b.admin for b in bs])
    wait_until(lambda: len(instant(prom, "up == 1", time.time())) == 3, timeout=15, what="Prometheus scraping the agents")
    phase = 10
    signal = {}
    for name, clients in (("low", 1), ("high", 12)):
        start = time.time()
        results_all = []
        ts = []
        for f in (fronts if clients > 1 else fronts[:1]):
            t = threading.Thread(target=lambda f=f: results_all.append(drive(f.listen, max(clients // 2, 1), phase)), daemon=True)
            t.start()
            ts.append(t)
        for t in ts:
            t.join(phase + 20)
        bad = sum(results_all)
        end = time.time()
        assert bad == 0, f"{name}: {bad} requests failed"
        time.sleep(2)  # the last scrape of the phase
        window = f"[{int(end - start)}s]"
        got = instant(prom, rule["expr"].replace("[1m]", window), end)
        assert len(got) == 1, got
        signal[name] = float(got[0]["value"][1])
    total = {q: float(instant(prom, f"sum({q})", time.time())[0]["value"][1])
             for q in ("huntlb_offers_total", 'huntlb_forwards_total{outcome="sent"}', "huntlb_plain_total", "huntlb_finals_total", "huntlb_finals_busy_total")}
    print(f"signal {signal}, counters {total}")
    # tier fronts send no offers (the few counted are forwards that found no peer free and were served where they were)
    assert total["huntlb_offers_total"] <= 0.05 * (total["huntlb_plain_total"] + total["huntlb_finals_total"]), total
    assert signal["low"] <= 0.05 and signal["high"] >= 0.5, signal
