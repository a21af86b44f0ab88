#!/bin/bash
# Envoy vs-least at 4 fronts, the agent before the handshake (03cd9c3) against today's (d4b258e), arms alternating per round.
cd "$(git rev-parse --show-toplevel)"
out=bench/data/fleet-faults
for r in 0 1 2 3; do
  if [ $((r % 2)) = 0 ]; then arms="pre after"; else arms="after pre"; fi
  for arm in $arms; do
    CARGO_TARGET_DIR=/tmp/$arm-target PYTHONPATH=.:bench HUNTLB_PROFILE=release timeout 900 .venv/bin/python bench/pairs.py envoy LR/full FWD/full --fronts 4 --reps 2 \
      --json $out/vs-least-envoy-$arm-r$r.jsonl > $out/vs-least-envoy-$arm-r$r.txt 2>&1
  done
done
echo done
