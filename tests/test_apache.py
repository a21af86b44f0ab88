"""Scoreboard load mode against a real Apache (Debian apache2, mpm_prefork): the
agent's `b` must follow Apache's BusyWorkers, including load that does not pass
through the agent, as SRLB's Apache agent did."""

import os
import shutil
import tempfile
import threading

import pytest
from harness import OFFER, metrics, request, wait_http, wait_until

APACHE = shutil.which("apache2") or "/usr/sbin/apache2"

CONF = """\
ServerRoot /usr/lib/apache2
ServerName localhost
Listen {listen}
PidFile {dir}/httpd.pid
ErrorLog {dir}/error.log
Mutex file:{dir} default
DefaultRuntimeDir {dir}
User nobody
Group nogroup
LoadModule mpm_prefork_module modules/mod_mpm_prefork.so
LoadModule authz_core_module modules/mod_authz_core.so
LoadModule status_module modules/mod_status.so
LoadModule cgi_module modules/mod_cgi.so
LoadModule alias_module modules/mod_alias.so
StartServers 8
MinSpareServers 8
MaxSpareServers 16
ServerLimit 16
MaxRequestWorkers 16
KeepAlive Off
ExtendedStatus On
DocumentRoot {dir}
<Location /server-status>
    SetHandler server-status
    Require all granted
</Location>
ScriptAlias /slow {dir}/slow.cgi
<Directory {dir}>
    Require all granted
</Directory>
"""

SLOW_CGI = """#!/bin/sh
echo "Content-Type: text/plain"
echo
sleep 3
echo done
"""


@pytest.fixture
def apache(procs, addrs):
    if not os.path.exists(APACHE):
        pytest.fail("apache2 is not installed: run `make setup`")
    d = tempfile.mkdtemp(prefix="huntlb-apache-", dir="/tmp")
    os.chmod(d, 0o755)
    host = addrs.host()
    listen = f"{host}:8081"
    with open(f"{d}/httpd.conf", "w") as f:
        f.write(CONF.format(listen=listen, dir=d))
    with open(f"{d}/slow.cgi", "w") as f:
        f.write(SLOW_CGI)
    os.chmod(f"{d}/slow.cgi", 0o755)
    p = procs.start("apache", [APACHE, "-d", "/usr/lib/apache2", "-f", f"{d}/httpd.conf", "-DFOREGROUND"])
    try:
        wait_http(listen, "/server-status?auto", proc=p, want=200)
        yield host, listen
    finally:
        p.stop()
        shutil.rmtree(d, ignore_errors=True)


def busy_workers(listen):
    _, _, body = request(listen, "GET", "/server-status?auto")
    for line in body.decode().splitlines():
        if line.startswith("BusyWorkers:"):
            return int(line.split(":")[1])
    raise AssertionError(body)


def test_scoreboard_mode_follows_apache_busy_workers(procs, apache):
    host, listen = apache
    _, agent, admin = procs.agent(
        host, listen, policy="static:2", load="apache",
        apache_status_url=f"http://{listen}/server-status?auto", apache_poll_ms=20,
    )
    # idle: BusyWorkers counts only the status request itself, which the agent subtracts
    wait_until(lambda: metrics(admin)["huntlb_busy"] == 0, what="idle scoreboard")
    assert request(agent, "GET", "/server-status?auto", headers=OFFER)[0] == 200
    held = []
    for k in (1, 2, 3):
        # load straight to Apache, not through the agent: only the scoreboard sees it
        t = threading.Thread(target=request, args=(listen, "GET", "/slow"), daemon=True)
        t.start()
        held.append(t)
        wait_until(lambda: metrics(admin)["huntlb_busy"] == k, timeout=5, what=f"huntlb_busy == {k}")
        # Both read snapshots; the agent's own 20 ms poll, in flight at the moment
        # of ours, is one more busy worker. Agreement is the steady state.
        wait_until(lambda: busy_workers(listen) - 1 == k, timeout=2, what=f"Apache BusyWorkers - 1 == {k} (agent and Apache agree)")
        status, h, _ = request(agent, "GET", "/server-status?auto", headers=OFFER)
        assert status == (200 if k < 2 else 425), f"k={k}"
    for t in held:
        t.join(timeout=10)
    wait_until(lambda: metrics(admin)["huntlb_busy"] == 0, what="scoreboard back to idle")
    assert request(agent, "GET", "/server-status?auto", headers=OFFER)[0] == 200
    m = metrics(admin)
    assert m["huntlb_inflight"] == 0
    assert m['huntlb_apache_polls_total{result="ok"}'] > 10 and m['huntlb_apache_polls_total{result="failed"}'] == 0
