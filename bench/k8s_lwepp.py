#!/usr/bin/env python3
"""GIE's own lightweight endpoint picker (`cmd/lwepp`, `make lwepp`) on the
real cluster (harness/k8scluster.py), with real Envoy in front, over
emulated model servers with the agent beside each: the picker alone against
the same picker over agents with `fleet_pass_plain`, at 1 and 2 active
replicas, paired on shared seeds (docs/llm.md, "Under your endpoint picker").

  PYTHONPATH=.:bench .venv/bin/python bench/k8s_lwepp.py --reps 3 --first-rep 0

What it installs (namespace `shop`, all gone with the cluster):

  servers   the chart (charts/huntlb) as release `llm`: SERVERS pods of the
            LLM emulator (`huntlb-llm`, llm_gateways' seats and time scale,
            on 0.0.0.0:9000 so the picker alone can name it) beside the agent
            (`load = "llm"`, the tier among the pods as the chart sets it up,
            `fleet_pass_plain` from the chart's plain fronts)
  pools     two InferencePools (GIE's CRD, v1) selecting those pods:
            `llm-agents` (targetPorts 8080: the agent) and `llm-direct`
            (targetPorts 9000: the engine, no agent in the path)
  gateways  Deployments `gw-agents` and `gw-direct`, REPLICAS pods each, a
            pod an Envoy and its own lwepp (Envoy's ext_proc to 127.0.0.1:9002,
            an ORIGINAL_DST cluster on `x-gateway-destination-endpoint`), every
            replica active, each pod its own IP (its own front to the agents);
            lwepp reads its pool and the pods through the apiserver with a
            ServiceAccount that may only get, list and watch them
  load      a pod on node 0 running `huntlb-llmload` at the gateway pods'
            IPs (request i to gateway i mod N), llm_gateways' sharegpt shape
            and load (its calibration, rho 0.85)

Arms: lweppN (the picker alone, N replicas: `gw-direct`'s first N pods) and
lweppaN (the same over agents: `gw-agents`'). A repetition is one seed for
every arm, the arms' order turning with it; each arm's prompts salted with its
name (no arm finds another's prompts cached). Per run: TTFT p50/p90/p99 at
the client, client errors, requests each engine finished
(`vllm:request_success_total`: served minus answered is what was processed
twice), the agents' forwards (`huntlb_forwards_total{outcome="sent"}`), the
agents' and gateways' CPU (the host's /proc, matched to the pods by cgroup).
Runs are added to bench/data/kubernetes/lwepp.json (a run of an arm and
repetition replaces the one before). The cluster comes up at the start and
goes down at the end, whatever happens (`k8scluster.down`).
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import data as rundata
from benchlib.reports import machine
from harness import k8scluster as k8s
from harness import k8sfleet as kf
from k8s_pairs import cpu, pids_of, ready_pods
from llm_gateways import SEATS, SERVERS, TIME_SCALE, WORKLOADS, fmt_ratio, load_data, params, pct, queued_share, ratios, token_metrics

ROOT = k8s.ROOT
DATA = ROOT / "bench" / "data" / "kubernetes" / "lwepp.json"
LWEPP_VERSION = "v1.6.0"
LWEPP_BIN = ROOT / ".cache" / "lwepp" / LWEPP_VERSION / "lwepp"
# the module `make lwepp` built from: the InferencePool CRD is its own
GIE = "sigs.k8s.io/gateway-api-inference-extension"
RELEASE = "llm"
ENGINE_PORT, AGENT_PORT, ADMIN_PORT = 9000, 8080, 9901
GATEWAY_PORT = 10000
GATEWAY_YAML = Path(__file__).resolve().parent / "configs" / "lwepp-gateway.yaml"
REPLICAS = 2
# images built here (`images`), from the local debian:bookworm-slim, no pull
LLM_IMAGE = "huntlb/llm:dev"
LWEPP_IMAGE = f"huntlb/lwepp:{LWEPP_VERSION}"
ARMS = {"lwepp1": ("direct", 1), "lweppa1": ("agents", 1), "lwepp2": ("direct", 2), "lweppa2": ("agents", 2)}
PAIRS = [("lweppa1", "lwepp1"), ("lweppa2", "lwepp2"), ("lweppa2", "lweppa1"), ("lwepp2", "lwepp1")]
KEYS = ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "e2e_mean_ms")
WORKLOAD = "sharegpt"


# ---------------------------------------------------------------- images

def images(rebuild: bool = False) -> None:
    """The emulator's image (huntlb-llm, huntlb-llmload: release builds) and
    lwepp's (the binary `make lwepp` built; GIE's own Dockerfile builds the
    same package on distroless, which this machine cannot pull), each on
    the local debian:bookworm-slim (the host's glibc, which both link)."""
    subprocess.run(["nice", "-n", "10", "cargo", "build", "-q", "--release", "-p", "huntlb-instruments",
                    "--bin", "huntlb-llm", "--bin", "huntlb-llmload"], cwd=ROOT, check=True, timeout=3600)
    if not LWEPP_BIN.exists():
        subprocess.run(["make", "lwepp"], cwd=ROOT, check=True, timeout=3600)
    k8s.run([str(ROOT / "scripts/docker-setup.sh"), "base"], timeout=600)
    rel = ROOT / "target" / "release"
    for ref, files, entry in ((LLM_IMAGE, {"huntlb-llm": rel / "huntlb-llm", "huntlb-llmload": rel / "huntlb-llmload"}, None),
                              (LWEPP_IMAGE, {"lwepp": LWEPP_BIN}, ["/usr/local/bin/lwepp"])):
        if not rebuild and k8s._image_exists(ref):
            continue
        ctx = Path(tempfile.mkdtemp(prefix="huntlb-lwepp-img-"))
        try:
            for name, src in files.items():
                shutil.copy2(src, ctx / name)
                # debug symbols: most of lwepp's 66 MB, no use in a pod
                subprocess.run(["strip", str(ctx / name)], check=True)
            (ctx / "Dockerfile").write_text("FROM debian:bookworm-slim\n" + "".join(f"COPY {n} /usr/local/bin/{n}\n" for n in files)
                                            + "USER 65532:65532\n" + (f"ENTRYPOINT {json.dumps(entry)}\n" if entry else ""))
            k8s.run(["nice", "-n", "19", "docker", "build", "-q", "-t", ref, str(ctx)], timeout=900)
        finally:
            shutil.rmtree(ctx, ignore_errors=True)


# ---------------------------------------------------------------- what it installs

def chart_values() -> str:
    """The chart's values: the emulator as the app (on every address, so the
    picker alone reaches it at ENGINE_PORT), the agent with load = "llm"."""
    return f"""workload:
  replicas: {SERVERS}
  containers:
  - name: engine
    image: {LLM_IMAGE}
    command: [huntlb-llm, --listen, "0.0.0.0:{ENGINE_PORT}", --model, m, --max-num-seqs, "{SEATS}", --time-scale, "{TIME_SCALE}"]
    readinessProbe: {{httpGet: {{path: /health, port: {ENGINE_PORT}}}, periodSeconds: 2}}
    resources:
      requests: {{cpu: 10m, memory: 16Mi}}
agent:
  app: "127.0.0.1:{ENGINE_PORT}"
  workers: {SEATS}                  # the engine's seats (--max-num-seqs)
  extraConfig:
    load: llm                       # prompts waiting for their first token weigh too
    app_stall_ms: 0                 # a long generation answers no head for a while
    app_timeout_ms: 600000
  resources:
    requests: {{cpu: 10m, memory: 16Mi}}
"""


def gateway_envoy() -> str:
    """The gateway's Envoy (one worker): bench/configs/lwepp-gateway.yaml with
    this script's ports (its comments say why each filter is there)."""
    text = GATEWAY_YAML.read_text().replace("ADMIN_PORT_", str(ADMIN_PORT)).replace("GATEWAY_PORT_", str(GATEWAY_PORT))
    return text


def manifests(replicas: int) -> str:
    """The pools, lwepp's RBAC, the gateways and the load pod."""
    sel = {"app.kubernetes.io/instance": RELEASE}
    docs: list[dict] = []
    for name, port in (("agents", AGENT_PORT), ("direct", ENGINE_PORT)):
        docs.append({"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": {"name": f"llm-{name}"},
                     "spec": {"selector": {"matchLabels": sel}, "targetPorts": [{"number": port}],
                              "endpointPickerRef": {"name": f"gw-{name}", "port": {"number": 9002}}}})
    # lwepp reads its pool and the pods of its namespace, nothing else
    docs += [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "lwepp"}},
             {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "lwepp"},
              "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                        {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": ["get", "list", "watch"]}]},
             {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "lwepp"},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lwepp"},
              "subjects": [{"kind": "ServiceAccount", "name": "lwepp", "namespace": kf.NS}]},
             {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gateway"}, "data": {"envoy.yaml": gateway_envoy()}}]
    for name in ("agents", "direct"):
        gw = f"gw-{name}"
        docs.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": gw},
                     "spec": {"replicas": replicas, "selector": {"matchLabels": {"gateway": gw}},
                              "template": {"metadata": {"labels": {"gateway": gw}}, "spec": {
                                  "serviceAccountName": "lwepp", "terminationGracePeriodSeconds": 5,
                                  "containers": [
                                      {"name": "lwepp", "image": LWEPP_IMAGE,
                                       "args": ["--pool-name", f"llm-{name}", "--pool-namespace", kf.NS, "--secure-serving=false",
                                                "--grpc-port", "9002", "--grpc-health-port", "9003", "--metrics-port", "9090",
                                                # a line per request at info: left out of the measurement
                                                "--zap-log-level", "error"],
                                       "readinessProbe": {"grpc": {"port": 9003, "service": "inference-extension"}, "periodSeconds": 1},
                                       "resources": {"requests": {"cpu": "10m"}}},
                                      {"name": "envoy", "image": "huntlb/envoy:dev",
                                       "command": ["envoy", "-c", "/etc/gateway/envoy.yaml", "--concurrency", "1",
                                                   "--disable-hot-restart", "-l", "warning"],
                                       "readinessProbe": {"tcpSocket": {"port": GATEWAY_PORT}, "periodSeconds": 1},
                                       "volumeMounts": [{"name": "gateway", "mountPath": "/etc/gateway"}],
                                       "resources": {"requests": {"cpu": "10m"}}}],
                                  "volumes": [{"name": "gateway", "configMap": {"name": "gateway"}}]}}}})
    docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "llmload"}, "spec": {
        "nodeName": k8s.node_name(0), "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "load", "image": LLM_IMAGE, "command": ["sleep", "infinity"],
                        "resources": {"requests": {"cpu": "100m"}}}]}})
    return "\n---\n".join(json.dumps(d) for d in docs)


def crd() -> str:
    out = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    return (Path(out) / f"{GIE}@{LWEPP_VERSION}" / "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml").read_text()


def install(f: kf.Fleet, replicas: int) -> None:
    for ref in (f"huntlb/agent:{kf.app_version()}", "huntlb/envoy:dev", LLM_IMAGE, LWEPP_IMAGE):
        f.c.push(ref)
    f.c.kubectl("apply", "-f", "-", input=crd().encode())
    f.c.kubectl("wait", "--for=condition=Established", "crd/inferencepools.inference.networking.k8s.io", "--timeout=60s", timeout=70)
    f.work.mkdir(parents=True, exist_ok=True)
    f.key_file.write_text(secrets.token_hex(32) + "\n")
    f.key_file.chmod(0o600)
    f.values_file.write_text(chart_values())
    f.helm("install", RELEASE, str(ROOT / "charts/huntlb"), "-n", kf.NS, "--create-namespace", "-f", str(f.values_file),
           "--set-file", f"fleetKey.value={f.key_file}")
    f.kubectl("apply", "-f", "-", input=manifests(replicas).encode())
    for d in (f"deploy/{RELEASE}", "deploy/gw-agents", "deploy/gw-direct"):
        f.kubectl("rollout", "status", d, "--timeout=300s", timeout=310)
    f.kubectl("wait", "--for=condition=Ready", "pod/llmload", "--timeout=120s", timeout=130)
    k8s._wait("every agent hearing its sample", lambda: kf.hears_sample(scrape(f, ADMIN_PORT), SERVERS) and len(servers(f)) == SERVERS, 90)


# ---------------------------------------------------------------- what runs

def servers(f: kf.Fleet) -> list[dict]:
    return sorted(ready_pods(f, f"app.kubernetes.io/instance={RELEASE}"), key=lambda p: p["metadata"]["name"])


def gateways(f: kf.Fleet, name: str) -> list[dict]:
    return sorted(ready_pods(f, f"gateway=gw-{name}"), key=lambda p: p["metadata"]["name"])


def scrape(f: kf.Fleet, port: int, pods: list[dict] | None = None) -> dict[str, dict[str, float]]:
    """Each server pod's /metrics at `port` (the agent's admin, or the
    engine's), read from node 1 in one exec; series as written, labels and all."""
    pods = servers(f) if pods is None else pods
    script = "; ".join(f"echo '=== {p['metadata']['name']}'; curl -sf --max-time 3 http://{p['status']['podIP']}:{port}/metrics"
                       for p in pods)
    text = f.c.docker_exec(1, "sh", "-c", script, check=False, timeout=60)
    out: dict[str, dict[str, float]] = {}
    cur = None
    for line in text.splitlines():
        if line.startswith("=== "):
            cur = out.setdefault(line[4:], {})
        elif cur is not None and line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                cur[re.sub(r'\{model_name="[^"]*"\}', "", k)] = float(v)
            except ValueError:
                pass
    return out


def engines(f: kf.Fleet) -> dict[str, dict[str, float]]:
    return scrape(f, ENGINE_PORT)


def quiet(f: kf.Fleet) -> None:
    """Nothing running or waiting at any engine."""
    k8s._wait("the engines idle", lambda: all(m.get("vllm:num_requests_running", 1) == 0 and m.get("vllm:num_requests_waiting", 1) == 0
                                              for m in engines(f).values()), 120, interval=1)


FORWARD_SENT = 'huntlb_forwards_total{outcome="sent"}'


def run_arm(f: kf.Fleet, arm: str, rate: float, seconds: float, seed: int, rep: int) -> dict:
    pool, n = ARMS[arm]
    gws = gateways(f, pool)[:n]
    if len(gws) < n:
        raise RuntimeError(f"{arm}: {len(gws)} gateway pods of gw-{pool} ready, want {n}")
    quiet(f)
    apps = servers(f)
    apids = pids_of(apps, "huntlb-agent")
    gpids = pids_of(gws, "envoy") + pids_of(gws, "lwepp")
    if len(apids) != SERVERS or len(gpids) != 2 * n:
        raise RuntimeError(f"{arm}: found {len(apids)} agents of {SERVERS} and {len(gpids)} gateway processes of {2 * n} on the host")
    served0 = {k: m["vllm:request_success_total"] for k, m in engines(f).items()}
    fwd0 = sum(m.get(FORWARD_SENT, 0) for m in scrape(f, ADMIN_PORT).values())
    a0, g0, t0 = cpu(apids), cpu(gpids), time.monotonic()
    argv = ["huntlb-llmload", "--rate", f"{rate:.4f}", "--duration", str(seconds), "--seed", str(seed), "--out", "/tmp/run.jsonl",
            "--workload", WORKLOAD, "--salt", arm]
    for k, v in WORKLOADS[WORKLOAD].items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    for g in gws:
        argv += ["--target", f"{g['status']['podIP']}:{GATEWAY_PORT}"]
    out = f.kubectl("exec", "llmload", "--", *argv, timeout=seconds + 300)
    wall = time.monotonic() - t0
    agents_cpu, gw_cpu = cpu(apids) - a0, cpu(gpids) - g0
    summary = json.loads(out.strip().splitlines()[-1])
    reqs = [json.loads(line) for line in f.kubectl("exec", "llmload", "--", "cat", "/tmp/run.jsonl", timeout=60).splitlines() if line]
    quiet(f)  # every answer counted at its engine before reading them
    served = {k: m["vllm:request_success_total"] - served0.get(k, 0) for k, m in engines(f).items()}
    fwd = sum(m.get(FORWARD_SENT, 0) for m in scrape(f, ADMIN_PORT).values()) - fwd0
    ok = [r for r in reqs if r["status"] == 200 and r["error"] is None]
    ttft = [r["ttft_us"] / 1e3 for r in ok]
    e2e = [r["e2e_us"] / 1e3 for r in ok]
    res = {"arm": arm, "rep": rep, "seed": seed, "workload": WORKLOAD, "salt": arm, "replicas": n, "over": pool,
           "started": time.time() - wall, "rate": rate, "seconds": seconds, "scheduled": len(reqs), "ok": len(ok),
           "errors": len(reqs) - len(ok), "error_kinds": sorted({r["error"] or str(r["status"]) for r in reqs if r not in ok})[:5],
           "ttft_p50_ms": pct(ttft, 50), "ttft_p90_ms": pct(ttft, 90), "ttft_p99_ms": pct(ttft, 99),
           "e2e_mean_ms": statistics.fmean(e2e) if e2e else float("nan"), "queued_share": queued_share(ttft), **token_metrics(ok),
           "served_per_server": [served[k] for k in sorted(served)], "forwards": fwd, "forwards_per_s": fwd / seconds,
           "agents_cpu_s": agents_cpu, "agents_cpu_ms_per_req": 1e3 * agents_cpu / len(ok) if ok else float("nan"),
           "gateways_cpu": gw_cpu / wall, "loadgen_cpu": summary["cpu_s"] / summary["wall_s"],
           "send_late_p99_ms": summary["send_late_p99_ms"]}
    print(f"  rep {rep} {arm:8s} rate {rate:.2f}/s: TTFT p50 {res['ttft_p50_ms']:7.1f} p90 {res['ttft_p90_ms']:7.1f} ms, "
          f"errors {res['errors']}, served-ok {sum(res['served_per_server']) - res['ok']:g}, forwards {fwd:g}, "
          f"served {res['served_per_server']}, agents {res['agents_cpu_ms_per_req']:.2f} ms/req, gateways {res['gateways_cpu']:.2f} cores, "
          f"late p99 {res['send_late_p99_ms']:.1f} ms", flush=True)
    return res


# ---------------------------------------------------------------- summary

def summary_lines(runs: list[dict]) -> list[str]:
    """Per arm its medians; the pairs' ratios (median, CI) per key."""
    out = []
    for arm in ARMS:
        rs = [r for r in runs if r["arm"] == arm]
        if not rs:
            continue
        def med(k: str) -> float:
            return statistics.median(r[k] for r in rs)
        out.append(f"{arm}: {len(rs)} runs, TTFT p50 {med('ttft_p50_ms'):.1f} p90 {med('ttft_p90_ms'):.1f} p99 {med('ttft_p99_ms'):.1f} ms, "
                   f"errors {sum(r['errors'] for r in rs)}, served-answered {sum(sum(r['served_per_server']) - r['ok'] for r in rs):g}, "
                   f"forwards/s {med('forwards_per_s'):.2f}, agents {med('agents_cpu_ms_per_req'):.2f} ms/req")
    for a, b in PAIRS:
        if any(r["arm"] == a for r in runs) and any(r["arm"] == b for r in runs):
            out.append(f"{a} / {b}: " + "; ".join(f"{k.removesuffix('_ms')} {fmt_ratio(ratios(runs, a, k, b))}" for k in KEYS))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=1, help="repetitions this invocation runs")
    ap.add_argument("--first-rep", type=int, default=0)
    ap.add_argument("--arms", default=",".join(ARMS), help=f"arms, comma separated (of {', '.join(ARMS)})")
    ap.add_argument("--rho", type=float, default=0.85, help="load, a fraction of llm_gateways' calibrated capacity")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds of arrivals a run")
    ap.add_argument("--images", action="store_true", help="build the emulator's and lwepp's images again")
    ap.add_argument("--smoke", action="store_true", help="install, send a request through each gateway, tear down (no data)")
    ap.add_argument("--keep", action="store_true", help="leave the cluster up (then `python -m harness.k8scluster down`)")
    ap.add_argument("--summary", action="store_true", help="print the data's medians and paired ratios, run nothing")
    a = ap.parse_args()
    if a.summary:
        print("\n".join(summary_lines(rundata.read(DATA)["runs"])))
        return 0
    arms = a.arms.split(",")
    bad = [x for x in arms if x not in ARMS]
    if bad:
        ap.error(f"--arms: no arm {bad}; the arms: {', '.join(ARMS)}")
    cal = params(load_data() or {}, WORKLOAD)
    if cal is None:
        raise SystemExit("no sharegpt calibration in bench/data/llm-gateways.json: run bench/llm_gateways.py --calibrate first")
    rate = a.rho * cal["calibration"]["per_server_rps"] * SERVERS
    data = rundata.read(DATA) if DATA.exists() else {"machine": machine(), "runs": []}
    t0 = time.monotonic()
    try:
        c = k8s.up(3)
        images(a.images)
        print(f"cluster: 3 nodes up in {time.monotonic() - t0:.0f} s", flush=True)
        with tempfile.TemporaryDirectory(prefix="huntlb-k8s-lwepp-") as tmp:
            f = kf.Fleet(c, Path(tmp))
            install(f, REPLICAS)
            print(f"installed: {SERVERS} engines with agents, {REPLICAS} gateways (Envoy + lwepp) per pool, "
                  f"{time.monotonic() - t0:.0f} s in; {rate:.2f} requests/s", flush=True)
            if a.smoke:
                smoke(f)
                return 0
            data.update(lwepp=LWEPP_VERSION, servers=SERVERS, seats=SEATS, time_scale=TIME_SCALE, rho=a.rho,
                        calibration=cal["calibration"], agent_image=agent_revision())
            for rep in range(a.first_rep, a.first_rep + a.reps):
                seed = 1 + rep * 1_000_003  # llm_gateways' seeds
                order = arms[rep % len(arms):] + arms[:rep % len(arms)]
                for arm in order:
                    res = run_arm(f, arm, rate, a.seconds, seed, rep)
                    data["runs"] = [r for r in data["runs"] if not (r["rep"] == rep and r["arm"] == arm)] + [res]
                    DATA.parent.mkdir(parents=True, exist_ok=True)
                    rundata.write(DATA, data)
    finally:
        if not a.keep:
            left = k8s.down()
            if any(left.values()):
                print(f"left behind: {left}", file=sys.stderr)
    for line in summary_lines(data["runs"]):
        print(line)
    print(f"{time.monotonic() - t0:.0f} s in all")
    return 0


def agent_revision() -> str:
    ref = f"huntlb/agent:{kf.app_version()}"
    return k8s.run(["docker", "image", "inspect", "-f", '{{index .Config.Labels "org.opencontainers.image.revision"}}', ref],
                   check=False).strip() or "unknown"


def smoke(f: kf.Fleet) -> None:
    """One completion through each gateway pod: who answered, and lwepp's log."""
    for pool in ("direct", "agents"):
        for g in gateways(f, pool):
            ip = g["status"]["podIP"]
            out = f.kubectl("exec", "llmload", "--", "huntlb-llmload", "--rate", "2", "--duration", "2", "--seed", "1",
                            "--target", f"{ip}:{GATEWAY_PORT}", "--out", "/tmp/smoke.jsonl", timeout=120, check=False)
            reqs = f.kubectl("exec", "llmload", "--", "cat", "/tmp/smoke.jsonl", check=False)
            print(f"gw-{pool} {g['metadata']['name']} {ip}: {out.strip().splitlines()[-1:]}\n  {reqs[:600]}", flush=True)
            print(f.kubectl("logs", g["metadata"]["name"], "-c", "lwepp", "--tail", "15", check=False)[-2000:], flush=True)
            print(f.kubectl("logs", g["metadata"]["name"], "-c", "envoy", "--tail", "15", check=False)[-2000:], flush=True)


if __name__ == "__main__":
    sys.exit(main())
