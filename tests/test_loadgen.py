"""The load generator measures what it is given: against a fixed-delay server at
a fixed rate it reports that delay, and it flags a run it could not keep up with."""

import json
import subprocess

from harness import binary


def loadgen(*args, timeout=60):
    return subprocess.run([binary("huntlb-loadgen"), *args], capture_output=True, text=True, timeout=timeout)


def constant_run(app, tmp_path, rate, seconds, *args):
    """A constant-rate run against `app` that must succeed: (stdout, report, p50 ms)."""
    out = tmp_path / "r.json"
    r = loadgen("--target", f"http://{app}/", "--rate", str(rate), "--duration", str(seconds), "--arrival", "constant",
                "--json", str(out), *args)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(out.read_text())
    return r.stdout, rep, dict((p, v) for p, v in rep["latency"]["percentiles"])[50.0] / 1000


def test_reports_the_servers_fixed_delay(procs, addrs, tmp_path):
    host = addrs.host()
    # 50 ms per request, cores high enough that requests never share one. The
    # generator times from each request's scheduled send, so it can never report
    # less than the server's 50 ms; above, the loopback, the debug builds and the
    # timer's millisecond rounding add ~1.3 ms on a quiet machine and 3.1 ms was
    # seen on a loaded CI runner. A unit or scheduling bug is off by far more
    # than the 10% allowed (at 20 ms the same costs did not fit).
    _, app = procs.workload(host, cores=1000, workers=1000, demand="const:50")
    # Lateness allowed up to 10% of the delay under test (the 2 ms default is for
    # scaled-down workloads; a stall of a slow shared VM passed it at 200 req/s).
    # Falling behind is tested on its own below.
    stdout, rep, p50_ms = constant_run(app, tmp_path, 200, 3, "--served-by-header", "workload-id", "--max-lateness-us", "5000")
    assert 49.5 <= p50_ms < 55.0, f"p50 {p50_ms:.2f} ms for a 50 ms server"
    assert rep["valid"] and rep["errors"] == 0
    assert rep["completed"] == rep["scheduled"] == 600
    assert rep["served_by"] == {f"app-{host}": 600}
    assert "Latency Distribution (HdrHistogram - Recorded Latency)" in stdout
    assert " 50.000%" in stdout and "Requests/sec:" in stdout


def test_flags_itself_invalid_beyond_what_it_can_send(procs, addrs, tmp_path):
    host = addrs.host()
    _, app = procs.workload(host, cores=1000, workers=1000, demand="const:0")
    out = tmp_path / "r.json"
    r = loadgen("--target", f"http://{app}/", "--rate", "2000000", "--duration", "2", "--arrival", "constant",
                "--max-inflight", "64", "--json", str(out))
    assert r.returncode == 3, r.stdout + r.stderr
    rep = json.loads(out.read_text())
    assert rep["valid"] is False and "behind" in rep["invalid_reason"]
    assert "INVALID RUN" in r.stdout


def test_work_draws_each_jobs_size_for_the_app(procs, addrs, tmp_path):
    # The app's own demand is 0; the generator's `--work const:40` makes every
    # job take 40 ms, which is what the client measures.
    host = addrs.host()
    _, app = procs.workload(host, cores=1000, workers=1000, demand="const:0")
    _, rep, p50_ms = constant_run(app, tmp_path, 100, 2, "--work", "const:40", "--max-lateness-us", "5000")
    assert 38.0 < p50_ms < 46.0, f"p50 {p50_ms:.2f} ms for 40 ms jobs"
    assert rep["errors"] == 0 and rep["completed"] == rep["scheduled"] >= 199


def test_a_bad_work_spec_is_refused_by_name():
    r = loadgen("--target", "http://127.0.0.1:9/", "--work", "exp:-1", "--duration", "1")
    assert r.returncode != 0 and "--work" in r.stderr and "exp:-1" in r.stderr


def test_a_heavy_tailed_run_that_kept_up_is_valid_and_one_that_queued_is_not(procs, addrs, tmp_path):
    # As in the many-fronts bench's heavy-tailed runs: bimodal jobs, 2% of
    # them 1.5 s long, leave long jobs to drain after the last send. Every request is answered and nothing queues
    # (1000 workers), but over the run's wall time the achieved rate fell
    # under 90% of the rate sent, and the bench called the run invalid. The
    # rule counts what was answered by the end of the schedule instead.
    from benchlib.fleet import summary
    host = addrs.host()
    _, app = procs.workload(host, cores=1000, workers=1000, demand="const:0")
    _, rep, _ = constant_run(app, tmp_path, 100, 2, "--work", "bimodal:5:1500:0.02", "--seed", "7", "--max-lateness-us", "20000")
    offered = rep["scheduled"] / rep["duration_s"]
    assert rep["errors"] == 0 and rep["completed"] == rep["scheduled"] >= 199
    assert rep["achieved_rate"] < 0.9 * offered, "the drain did not stretch the run: the case is not met"
    assert rep["completed_by_end"] >= 0.9 * rep["scheduled"], rep["completed_by_end"]
    s = summary(rep)
    assert s["valid"], s["invalid_reason"]
    # One worker cannot keep up with 100 jobs a second of 20 ms: a backlog
    # grows (half the requests are still queued when the schedule ends), and
    # the run is invalid, though every request is answered in the end.
    host2 = addrs.host()
    _, slow = procs.workload(host2, cores=1, workers=1, demand="const:0", backlog=4096)
    _, rep2, _ = constant_run(slow, tmp_path, 100, 2, "--work", "const:20", "--max-lateness-us", "20000", "--timeout-ms", "60000")
    assert rep2["errors"] == 0 and rep2["completed"] == rep2["scheduled"]
    s2 = summary(rep2)
    assert not s2["valid"] and "could not keep up" in s2["invalid_reason"], s2
