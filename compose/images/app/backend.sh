#!/bin/bash
# One backend: the emulated app on loopback, the huntlb agent in front of it
# (offers on :8080, /metrics on :9901). The agent is the container's main
# process, so `docker stop` (SIGTERM through init) drains it: offers refused,
# health 503 for DRAIN_GRACE_MS (the fronts take it out), then its connections
# close (idle ones at once, busy ones after their response) and it exits.
set -eu
seed=$(hostname | cksum | cut -d' ' -f1)
huntlb-workload --listen 127.0.0.1:9000 --id "app-$(hostname)" --workers "$WORKERS" --cores "$CORES" \
    --demand "$DEMAND" --backlog 1024 --seed "$seed" &
# The agent listens only once the app does: a proxy that sends to a new backend
# before its first health check (HAProxy does, as a DNS-found server leaves
# maintenance) then meets a refused connection, which it retries elsewhere,
# not an agent answering 502 for an app still starting.
for _ in $(seq 1 100); do
    (exec 3<>/dev/tcp/127.0.0.1/9000) 2>/dev/null && break
    sleep 0.05
done
# FORWARD=on: the agents form a forwarding tier (docs/agent.md, "Forwarding"):
# every backend container answers to the DNS name `backends`, resolved again
# every second, so backends that come and go are peers from then on.
fleet=()
if [ "${FORWARD:-off}" = on ]; then
    ip=$(hostname -i | cut -d' ' -f1)
    # reports are sealed with the key compose mounts (build.sh made it); the
    # IP in fleet_advertise is where this agent's reports come from
    # FLEET_PEERS, FLEET_KEY_FILE: the Swarm stack (compose/swarm/) names its
    # peers tasks.backends:9700 and holds the key as a Docker secret
    fleet=(--fleet-listen 0.0.0.0:9700 --fleet-peers "${FLEET_PEERS:-backends:9700}" --fleet-advertise "$ip:8080"
           --fleet-key-file "${FLEET_KEY_FILE:-/run/huntlb/fleet.key}")
fi
exec huntlb-agent --listen 0.0.0.0:8080 --admin 0.0.0.0:9901 --app 127.0.0.1:9000 --id "$(hostname)" \
    --policy "$POLICY" --workers "$WORKERS" --drain-grace-ms "${DRAIN_GRACE_MS:-5000}" "${fleet[@]}"
