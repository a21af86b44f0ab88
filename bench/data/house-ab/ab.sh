#!/bin/bash
# bench/pairs.py at 4 fronts, HAProxy's leastconn against the tier's FWD/least and the plain front's FWDp/plain:
# this tree against the tree before the house's work (one testbed, each key declared once, the fleet's state in one
# owner), the two alternating rep by rep, which goes first alternating too. Each run is `--reps 1`: pairs.py's
# repetition 0, so every run of both trees draws the same arrivals and job sizes (benchlib.testbed.common_seed of the
# rate, repetition 0 and 4 fronts); pairs.py has no seed option. The runs go beside this script (ROLE-rN.jsonl and its
# printout ROLE-rN.txt, ROLE pre or now); summary.py sums them up.
# PRE_TREE: a checkout of the tree before (`git worktree add PRE_TREE ba4c3b1`, .venv and .cache linked), built with
# `cargo build --release -p huntlb-agent -p huntlb-instruments` into PRE_TARGET (default PRE_TREE/target); this tree
# built the same way (`make release`). LOCK: the lock every load run on the machine takes, held for one round (about
# 1.5 minutes); ran as `ROUNDS=0 ./ab.sh`, then the rest under one hold: `flock LOCK env LOCK=OTHER ROUNDS="1 2 3 4 5" ./ab.sh`
# (round 4's run of this tree again alone, README.md says why).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$here" rev-parse --show-toplevel)
pre=${PRE_TREE:?PRE_TREE: a checkout of the tree before, ba4c3b1}
pre_target=${PRE_TARGET:-$pre/target}
run() {  # one tree's run: ROLE REP DIR TARGET
  (cd "$3" && env CARGO_TARGET_DIR="$4" PYTHONPATH=.:bench HUNTLB_PROFILE=release timeout 420 \
    "$root/.venv/bin/python" bench/pairs.py haproxy leastconn FWD/least FWDp/plain --fronts 4 --reps 1 \
    --json "$here/$1-r$2.jsonl" > "$here/$1-r$2.txt" 2>&1)
  echo "$1 r$2 rc=$? $(date +%T)"
}
export -f run
export root here
for r in ${ROUNDS:-0 1 2 3 4 5}; do
  # a round's two runs under one hold of the lock, which tree first alternating
  now="run now $r $root ${CARGO_TARGET_DIR:-$root/target}" before="run pre $r $pre $pre_target"
  if [ $((r % 2)) = 0 ]; then order="$before; $now"; else order="$now; $before"; fi
  flock "${LOCK:-/work/wt/bench.lock}" bash -c "$order"
done
