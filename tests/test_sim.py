"""huntlb-sim, the bench's simulator, as its users call it: flags in, JSON out."""

import json
import subprocess

from harness import binary


def sim(*args):
    return subprocess.run([binary("huntlb-sim"), *args], capture_output=True, text=True, timeout=60)


def test_one_report_per_rate_and_hunting_beats_random_at_high_load():
    common = ["--servers", "12", "--mean-ms", "10", "--requests", "30000", "--rate", "600,2100"]
    rr = [json.loads(l) for l in sim(*common, "--dispatch", "random").stdout.splitlines()]
    dyn = [json.loads(l) for l in sim(*common, "--dispatch", "hunt:dynamic").stdout.splitlines()]
    assert [r["rate"] for r in rr] == [600.0, 2100.0]
    assert sum(rr[0]["served_per_server"]) == 30000 and rr[0]["rejected"] == 0
    assert rr[0]["acceptance"] is None and 0.35 < dyn[1]["acceptance"] < 0.65
    # rho 0.875 of the nominal 2400 req/s: SR_dyn well ahead of random
    assert dyn[1]["mean_ms"] * 1.3 < rr[1]["mean_ms"], (dyn[1]["mean_ms"], rr[1]["mean_ms"])


def test_bad_input_is_named():
    for args, word in ((["--dispatch", "hunt:static:x", "--rate", "10"], "--dispatch"),
                       (["--dispatch", "fastest", "--rate", "10"], "--dispatch"),
                       (["--dispatch", "random", "--rate", "0"], "--rate"),
                       (["--dispatch", "random", "--rate", "10", "--servers", "1"], "--servers")):
        r = sim(*args)
        assert r.returncode != 0 and word in r.stderr, (args, r.stderr)
        assert r.stdout == ""


def test_old_names_run_the_same_with_one_warning_naming_the_new():
    # The forward dispatcher's old form and the keep count's old flag, as a
    # user's script may still have them: the same run, a warning naming each new name.
    common = ["--servers", "6", "--mean-ms", "10", "--requests", "3000", "--rate", "800", "--fleet-sample", "4"]
    old = sim(*common, "--dispatch", "forward-least:0:seen=1", "--fleet-keep", "1")
    new = sim(*common, "--dispatch", "forward-least:peer_margin=0,seen_margin=1", "--fleet-sample-keep", "1")
    assert old.returncode == 0 and new.returncode == 0, (old.stderr, new.stderr)
    assert old.stdout == new.stdout and new.stderr == ""
    assert "write `forward-least:peer_margin=0,seen_margin=1`" in old.stderr and "write --fleet-sample-keep" in old.stderr
    both = sim(*common, "--dispatch", "forward-least", "--fleet-keep", "1", "--fleet-sample-keep", "1")
    assert both.returncode != 0 and "--fleet-sample-keep: given twice" in both.stderr
