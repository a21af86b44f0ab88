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
