#!/bin/sh
# One backend: the emulated app on loopback, the huntlb agent in front of it
# (offers on :8080, /metrics on :9901). The agent is the container's main
# process, so `docker stop` (SIGTERM through init) drains it: offers refused,
# health 503 for 2 s, in-flight requests finish, then it exits.
set -eu
seed=$(hostname | cksum | cut -d' ' -f1)
huntlb-workload --listen 127.0.0.1:9000 --id "app-$(hostname)" --workers "$WORKERS" --cores "$CORES" \
    --demand "$DEMAND" --backlog 1024 --seed "$seed" &
exec huntlb-agent --listen 0.0.0.0:8080 --admin 0.0.0.0:9901 --app 127.0.0.1:9000 --id "$(hostname)" \
    --policy "$POLICY" --workers "$WORKERS"
