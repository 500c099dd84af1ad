"""Scorer `kv`: how full the replica's KV cache is, as occupancy / headroom.

The M/M/1 waiting-time shape: near zero on an idle cache, steep as it fills (0.5 at half full, 2.3 at 70 %, 49 at
98 %), so two requests on a full cache cost more than twenty on an empty one. A replica whose cache is nearly full
queues or preempts a new request however few requests it holds.
"""

from __future__ import annotations

from thinktier.cluster.scorers.candidate import Candidate

MIN_KV_HEADROOM = 0.01
"""Headroom floor, so a full replica scores high but finite (it stays a last resort)."""


def score(candidate: Candidate) -> float:
    kv = min(max(candidate.stats.kv_occupancy, 0.0), 1.0)
    return kv / max(1.0 - kv, MIN_KV_HEADROOM)
