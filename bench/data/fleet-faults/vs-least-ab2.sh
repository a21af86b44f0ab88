#!/bin/bash
# vs-least at 4 fronts, PROXY envoy or haproxy: the tree before the handshake (03cd9c3: its harness, front and agent,
# in /work/wt-pre, built into /tmp/pre-target) against today's (main: a71238c for Envoy, a2e479e for HAProxy, the same
# agent and fronts), arms alternating per round, same seeds per repetition.
# Ran: ./vs-least-ab2.sh envoy (rounds 0-3), ROUNDS="4 5 6 7 8 9" ./vs-least-ab2.sh envoy, ROUNDS="0 1 2 3 4 5" ./vs-least-ab2.sh haproxy
proxy=$1
case $proxy in envoy) pair="LR/full FWD/full" ;; haproxy) pair="leastconn FWD/least" ;; *) echo "usage: $0 envoy|haproxy" >&2; exit 2 ;; esac
out=/work/main/bench/data/fleet-faults
for r in ${ROUNDS:-0 1 2 3}; do
  if [ $((r % 2)) = 0 ]; then arms="pre now"; else arms="now pre"; fi
  for arm in $arms; do
    if [ $arm = pre ]; then dir=/work/wt-pre; tgt=/tmp/pre-target; else dir=/work/main; tgt=/work/main/target; fi
    cd $dir
    flock /tmp/huntlb-load.lock env CARGO_TARGET_DIR=$tgt PYTHONPATH=.:bench HUNTLB_PROFILE=release timeout 900 /work/main/.venv/bin/python bench/pairs.py $proxy $pair --fronts 4 --reps 2 \
      --json $out/vs-least-$proxy-ab2-$arm-r$r.jsonl > $out/vs-least-$proxy-ab2-$arm-r$r.txt 2>&1
    echo "$arm r$r rc=$? $(date +%T)"
  done
done
echo done
