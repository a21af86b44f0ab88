"""What huntlb's benchmark scenarios share, one module per job:

* `stats`: means and medians with 95% confidence intervals, paired ratios, Jain's index;
* `reports`: where results go (reports in docs/results/, their data in bench/data/),
  the machine line, writing a result, and the rule for client errors (flagged next to
  the numbers, never averaged in quietly);
* `data`: the data files' compact form (a line per run; CDFs and perf tables gzipped beside);
* `render`: a report from its template in bench/reports/ and the values a scenario computed;
* `tools`: the measuring tools: wrk, a process's CPU time, callgrind's instruction
  counts, the simulator;
* `fronts`: starting a front (Envoy or HAProxy, from the committed example config)
  over any backends, pinning, the static backends of the overhead runs;
* `fleet`: workload apps behind agents, the balancing strategies, the open-loop drive;
* `runs`: the record of one open-loop run, and `select`, the one way to pick runs;
* `plots`: the figures, drawn from a scenario's JSON.

The scenarios (bench/*.py) import this package and `harness` (the integration
tests' launcher, from the repository root), never each other.
"""

import signal
import sys

# A benchmark stopped with SIGTERM (timeout, kill) unwinds like Ctrl-C, so its
# `finally` stops every process it started.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
