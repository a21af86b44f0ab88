#!/bin/bash
# vs-least at 4 fronts, PROXY envoy or haproxy: the tree before the handshake (its harness, front and agent) against
# this tree (the same agent and fronts), arms alternating per round, same seeds per repetition. The runs go beside
# this script; vs-least-ab2-summary.py PROXY sums them up.
# PRE_TREE: a checkout of the tree before the handshake (`git worktree add PRE_TREE 03cd9c3`), built with
# `make release` into PRE_TARGET (default PRE_TREE/target). LOCK: the lock every load run on the machine takes.
# Ran: ./vs-least-ab2.sh envoy (rounds 0-3), ROUNDS="4 5 6 7 8 9" ./vs-least-ab2.sh envoy, ROUNDS="0 1 2 3 4 5" ./vs-least-ab2.sh haproxy
set -u
proxy=${1:-}
case $proxy in envoy) pair="LR/full FWD/full" ;; haproxy) pair="leastconn FWD/least" ;; *) echo "usage: PRE_TREE=DIR $0 envoy|haproxy" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$here" rev-parse --show-toplevel)
pre=${PRE_TREE:?PRE_TREE: a checkout of the tree before the handshake}
pre_target=${PRE_TARGET:-$pre/target}
for r in ${ROUNDS:-0 1 2 3}; do
  if [ $((r % 2)) = 0 ]; then arms="pre now"; else arms="now pre"; fi
  for arm in $arms; do
    if [ $arm = pre ]; then dir=$pre; tgt=$pre_target; else dir=$root; tgt=${CARGO_TARGET_DIR:-$root/target}; fi
    (cd "$dir" && flock "${LOCK:-/tmp/huntlb-load.lock}" env CARGO_TARGET_DIR="$tgt" PYTHONPATH=.:bench HUNTLB_PROFILE=release timeout 900 \
      "$root/.venv/bin/python" bench/pairs.py $proxy $pair --fronts 4 --reps 2 \
      --json "$here/vs-least-$proxy-ab2-$arm-r$r.jsonl" > "$here/vs-least-$proxy-ab2-$arm-r$r.txt" 2>&1)
    echo "$arm r$r rc=$? $(date +%T)"
  done
done
echo done
