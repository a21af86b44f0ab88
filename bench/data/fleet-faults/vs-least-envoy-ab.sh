#!/bin/bash
# Envoy vs-least at 4 fronts, the agent before the handshake against the agent after it, arms alternating per round.
# PRE_TARGET and AFTER_TARGET: cargo target directories holding each tree's release build (`make release` with
# CARGO_TARGET_DIR set; the trees before and after the handshake, as vs-least-ab2.sh says). The runs go beside this
# script; vs-least-envoy-ab-summary.py sums them up.
set -u
# both builds named before any run starts
pre_target=${PRE_TARGET:?PRE_TARGET: the build before the handshake}
after_target=${AFTER_TARGET:?AFTER_TARGET: the build after it}
here=$(cd "$(dirname "$0")" && pwd)
cd "$(git -C "$here" rev-parse --show-toplevel)"
for r in 0 1 2 3; do
  if [ $((r % 2)) = 0 ]; then arms="pre after"; else arms="after pre"; fi
  for arm in $arms; do
    if [ $arm = pre ]; then tgt=$pre_target; else tgt=$after_target; fi
    CARGO_TARGET_DIR=$tgt PYTHONPATH=.:bench HUNTLB_PROFILE=release timeout 900 .venv/bin/python bench/pairs.py envoy LR/full FWD/full --fronts 4 --reps 2 \
      --json "$here/vs-least-envoy-$arm-r$r.jsonl" > "$here/vs-least-envoy-$arm-r$r.txt" 2>&1
  done
done
echo done
