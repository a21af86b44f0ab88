#!/usr/bin/env bash
# The dashboard as a person sees it: headless Chromium (Debian's `chromium`)
# loads the page of a running demo, lets its scripts query Prometheus, and
# writes a PNG. Used for docs/img/dashboard.png.
#   compose/screenshot.sh [URL] [OUT.png]
set -euo pipefail
url=${1:-http://127.0.0.1:9090/user/index.html}
out=${2:-docs/img/dashboard.png}
command -v chromium >/dev/null || { echo "screenshot: apt-get install chromium (scripts/docker-setup.sh install --chromium)" >&2; exit 1; }
# --virtual-time-budget: run the page's timers and fetches for 8 s of page time before the shot
chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,1560 \
    --virtual-time-budget=8000 --screenshot="$out" "$url" 2>/dev/null
echo "screenshot: $out"
