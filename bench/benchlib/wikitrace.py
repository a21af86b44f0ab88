"""A Wikipedia-like request trace for the MediaWiki replicas, in the
`SECONDS PATH` lines that `huntlb-loadgen --trace` replays open-loop (ms
granularity), so every strategy meets the very same requests (paired).

Seed 002 § VI replayed 24 hours of WikiBench traces (a 10% sample of
Wikipedia's requests, English Wikipedia only, replayed at 50%). Those traces
cannot be fetched here, so this draws one from a model of the published
characterisation. What each part rests on:

* **Classes.** Requests for wiki pages (`/wiki/index.php?title=...`, the
  paper's own marker of a page), static files (skins, scripts, images from the
  MediaWiki tree: "of the order of a millisecond" in the paper, and the same
  under every policy), and pages rendered anew (a parser cache miss: here
  `api.php?action=parse` of the page's wikitext, which never reads the cache).
  Default shares: 50% pages, 45% static, 5% renders (`--shares`). On Wikipedia
  most of these are absorbed by the caching layer in front of the
  application servers; the seed's testbed had no such layer, and neither does
  this one. The shares are this model's assumption, not a published figure: the
  published breakdowns (Urdaneta, Pierre, van Steen, "Wikipedia workload
  analysis for decentralized hosting", Computer Networks 53(11), 2009, § 4;
  van Baaren, "WikiBench", VU Amsterdam MSc thesis, 2009) classify the 10%
  trace by request type, and could not be read from this machine; set
  `--shares` to them where you have them.
* **Popularity.** Page views follow a Zipf-like law over the pages (rank r
  drawn with probability ~ 1/r^alpha, `--zipf`, default 1.0), the shape both
  works report for page popularity (Urdaneta et al. § 5; WikiBench keeps it when
  it samples the trace down); which page has which rank is a seeded
  permutation, so popularity is independent of size, as on Wikipedia. Renders
  draw their page from the same law (popular pages are edited and purged more).
  Static files follow a Zipf law of their own over a fixed set of real files.
* **The day.** The rate follows a daily cycle, compressed so that 24 hours
  take `--day-seconds`: the lowest rate at 08:00 UTC, as in the paper's Figure 6
  ("the off-peak period around 8:00 UTC"), the highest twelve hours later, a
  peak-to-trough ratio `--peak-ratio` (default 2.0; Wikipedia's request rate
  rises through the European and American working day; Wikimedia's own traffic
  graphs put the daily peak in 12:00-18:00 UTC). Within a moment, arrivals are
  Poisson (a thinned non-homogeneous Poisson process).

The trace is deterministic for its arguments (`--seed`); a JSON summary beside
it gives the shares, the rate per 10-minute (compressed) bin and the share of
views that went to the top 1% of pages, so a report can show what was replayed.

Written to a file by bench/wiki_trace.py; replayed by bench/wiki_replay.py.
"""

from __future__ import annotations

import bisect
import math
import random
from pathlib import Path


SCRIPT_PATH = "/wiki"
MEDIAWIKI = Path("/usr/share/mediawiki")
# The static files a MediaWiki page makes a browser fetch, from Debian's tree
# (checked at generation time when the tree is there). Most popular first.
STATIC_FILES = [
    "resources/assets/poweredby_mediawiki_88x31.png",
    "resources/assets/change-your-logo.svg",
    "resources/assets/change-your-logo-icon.svg",
    "resources/assets/wiki.png",
    "resources/assets/mediawiki.png",
    "resources/assets/poweredby_mediawiki_132x47.png",
    "resources/assets/poweredby_mediawiki_176x62.png",
    "resources/lib/jquery/jquery.js",
    "resources/src/startup/mediawiki.loader.js",
    "skins/Vector/skinStyles/jquery.ui/images/ui-icons_2e83ff_256x240.png",
    "skins/Vector/skinStyles/jquery.ui/images/ui-bg_flat_15_cd0a0a_40x100.png",
    "skins/Vector/skinStyles/jquery.ui/images/ui-icons_72a7cf_256x240.png",
]
DAY = 86400.0
TROUGH_UTC_H = 8.0  # seed 002, Figure 6: the off-peak around 08:00 UTC
BIN_S = 600.0  # the paper's 10-minute bins


def page_title(i: int) -> str:
    """The generated wiki's page i (harness.wiki.generate_pages names them so)."""
    return f"Article_{i:05d}"


def view_path(i: int) -> str:
    return f"{SCRIPT_PATH}/index.php?title={page_title(i)}"


def render_path(i: int) -> str:
    # the page's whole wikitext transcluded and parsed anew: no parser cache
    return f"{SCRIPT_PATH}/api.php?action=parse&format=json&disablelimitreport=1&title=R&text=%7B%7B:{page_title(i)}%7D%7D"


def classify(path: str) -> str:
    """page | render | static, from a trace path."""
    if path.startswith(f"{SCRIPT_PATH}/index.php"):
        return "page"
    if path.startswith(f"{SCRIPT_PATH}/api.php?action=parse"):
        return "render"
    return "static"


class Zipf:
    """Ranks 0..n-1 with P(r) ~ 1/(r+1)^alpha, drawn by bisection on the CDF."""

    def __init__(self, n: int, alpha: float):
        if n < 1 or alpha < 0:
            raise ValueError(f"Zipf: need n >= 1 and alpha >= 0, got n={n}, alpha={alpha}")
        acc, self.cdf = 0.0, []
        for r in range(n):
            acc += 1.0 / (r + 1) ** alpha
            self.cdf.append(acc)
        self.total = acc

    def draw(self, rng: random.Random) -> int:
        return min(bisect.bisect_left(self.cdf, rng.random() * self.total), len(self.cdf) - 1)


def rate_at(t_day: float, mean: float, peak_ratio: float) -> float:
    """Requests/s at `t_day` seconds after 00:00 UTC of the (uncompressed)
    day: a sinusoid with its trough at 08:00 and its peak at 20:00, mean `mean`,
    peak/trough `peak_ratio`."""
    a = (peak_ratio - 1) / (peak_ratio + 1)
    phase = 2 * math.pi * (t_day / DAY - TROUGH_UTC_H / 24)
    return mean * (1 - a * math.cos(phase))


def generate(pages: int, mean_rate: float, day_seconds: float, seed: int = 1, zipf: float = 1.0,
             shares: tuple[float, float, float] = (0.50, 0.45, 0.05), peak_ratio: float = 2.0,
             start_utc_h: float = 0.0, hours: float = 24.0, static_files: list[str] | None = None) -> list[tuple[float, str]]:
    """The trace: (seconds from the start of the replay, path), in time order.
    `mean_rate` is the day's mean request rate of the *replay* (after
    compression); `hours` of the day from `start_utc_h` are replayed."""
    if pages < 1:
        raise ValueError("--pages must be >= 1")
    if not (mean_rate > 0 and day_seconds > 0 and 0 < hours <= 24 and peak_ratio >= 1):
        raise ValueError("need --mean-rate > 0, --day-seconds > 0, 0 < --hours <= 24, --peak-ratio >= 1")
    if len(shares) != 3 or any(s < 0 for s in shares) or abs(sum(shares) - 1) > 1e-6:
        raise ValueError(f"--shares: three non-negative shares (pages, static, renders) summing to 1, got {shares}")
    static_files = static_files or STATIC_FILES
    rng = random.Random(seed)
    # popularity rank -> page: a seeded permutation, independent of page size
    order = list(range(pages))
    random.Random(seed ^ 0x9A6E).shuffle(order)
    page_zipf, static_zipf = Zipf(pages, zipf), Zipf(len(static_files), 1.0)
    scale = day_seconds / DAY  # replay seconds per day-second
    peak = rate_at(TROUGH_UTC_H * 3600 + DAY / 2, mean_rate, peak_ratio)
    span = hours / 24 * day_seconds
    out, t = [], 0.0
    # thinning: candidates at the peak rate, each kept with rate(t)/peak
    for _ in range(int(peak * span * 3) + 1000):
        t += rng.expovariate(peak)
        if t >= span:
            break
        t_day = (start_utc_h * 3600 + t / scale) % DAY
        if rng.random() * peak > rate_at(t_day, mean_rate, peak_ratio):
            continue
        u = rng.random()
        if u < shares[0]:
            path = view_path(order[page_zipf.draw(rng)])
        elif u < shares[0] + shares[1]:
            path = f"{SCRIPT_PATH}/{static_files[static_zipf.draw(rng)]}"
        else:
            path = render_path(order[page_zipf.draw(rng)])
        out.append((round(t, 3), path))
    return out


def summarize(trace: list[tuple[float, str]], pages: int, day_seconds: float, start_utc_h: float = 0.0) -> dict:
    kinds = {"page": 0, "static": 0, "render": 0}
    views: dict[str, int] = {}
    bin_s = BIN_S * day_seconds / DAY
    bins: dict[int, int] = {}
    for t, p in trace:
        k = classify(p)
        kinds[k] += 1
        if k == "page":
            views[p] = views.get(p, 0) + 1
        bins[int(t // bin_s)] = bins.get(int(t // bin_s), 0) + 1
    n = len(trace)
    top = sorted(views.values(), reverse=True)
    top1 = sum(top[:max(1, pages // 100)])
    per_bin = [round(bins.get(b, 0) / bin_s, 2) for b in range(max(bins) + 1)] if bins else []
    return {
        "requests": n,
        "seconds": trace[-1][0] if trace else 0.0,
        "mean_rate": round(n / trace[-1][0], 2) if n and trace[-1][0] > 0 else 0.0,
        "shares": {k: round(v / n, 4) if n else 0.0 for k, v in kinds.items()},
        "pages_viewed": len(views),
        "top_1pct_pages_share_of_views": round(top1 / kinds["page"], 4) if kinds["page"] else 0.0,
        "bin_seconds": round(bin_s, 3),
        "start_utc_h": start_utc_h,
        "rate_per_bin": per_bin,
        "peak_to_trough": round(max(per_bin) / max(min(per_bin[:-1] or per_bin), 1e-9), 2) if per_bin else 0.0,
    }
