#!/bin/sh
# Envoy does not read its environment: put .env's values into the config.
set -eu
ms=$HEALTH_INTERVAL_MS
HEALTH_INTERVAL_S=$((ms / 1000)).$(printf %03d $((ms % 1000)))
sed -e "s/\${HEALTH_INTERVAL_S}/$HEALTH_INTERVAL_S/g" -e "s/\${HEALTH_FALL}/$HEALTH_FALL/g" \
    -e "s/\${HEALTH_RISE}/$HEALTH_RISE/g" -e "s/\${KEEPALIVE_S}/$KEEPALIVE_S/g" /etc/envoy/envoy.yaml >/tmp/envoy.yaml
if grep -n '\${' /tmp/envoy.yaml; then echo "entrypoint: a \${VAR} above has no value" >&2; exit 1; fi
exec envoy -c /tmp/envoy.yaml --concurrency "$ENVOY_CONCURRENCY" --disable-hot-restart -l warning
