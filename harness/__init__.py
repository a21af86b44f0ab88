"""huntlb's harness: real processes, proxies and hunters on loopback, for the
integration tests, the benchmarks and the demo alike. One module per job:

* `procs`: starting and stopping processes (by PID, always), loopback addresses;
* `net`: requests, raw exchanges, metrics, bounded waits;
* `envoy`, `haproxy`: each real proxy with the committed example configs;
* `testbed`: one way to describe a fleet (apps, agents, a tier or not) and
  where it runs, and to start, wait for and stop it;
* `hunters`: backends (an app behind the agent or a sidecar);
* `fronts`: the committed hunting fronts over a list of backends.
* `wiki`: real MediaWiki replicas (a template wiki, its copies, an Apache and
  an agent each) for the Wikipedia replay; imported as `harness.wiki`.
* `cluster`: an emulated cluster (hosts as network namespaces on one bridge,
  dnsmasq as a headless service, faults as methods; root); imported as
  `harness.cluster` (docs/cluster.md).

Importable from the repository root (`pytest.ini` and the Makefile put it on
the path); the names below are the public surface.
"""

from harness.envoy import (EXAMPLES, WASM, bind_source as envoy_bind_source, envoy_binary, envoy_host_health, envoy_stats, front_config, sidecar_config,
                           sock, start_envoy, wait_envoy_hosts_healthy)
from harness.fronts import FRONTS, Front, start_front, wait_all_up
from harness.haproxy import (HAPROXY_EXAMPLES, HAPROXY_VERSIONS, TRIXIE, HaproxyRoot, bind_source as haproxy_bind_source, haproxy_config, haproxy_front_text, least_pick, random_offer, wait_runtime,
                             haproxy_runtime, haproxy_server_states, servers_section, start_haproxy)
from harness.hunters import (Backend, Hunter, counts, each_refused_once_then_served_elsewhere, hold, path_count, start_backends, start_fleet,
                             start_hunted_backends, start_hunter, tries_past_a_loaded_one)
from harness.net import FINAL, OFFER, app_stats, closed_loop, concurrent_statuses, metrics, raw_exchange, request, wait_http, wait_tcp, wait_until
from harness.procs import ROOT, TARGET, Addrs, Proc, Procs, agent_default, agent_defaults, binary
from harness.testbed import FLEET_PORT, FleetSpec, Loopback, Testbed, heard_of, peers_of, tier_opts, wait_heard

__all__ = [n for n in dir() if not n.startswith("_")]
