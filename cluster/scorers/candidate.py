"""What a scorer sees: one replica, as the router knows it, for one request."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from thinktier.deployments.tier.replica_stats import ReplicaStats


class Candidate(NamedTuple):
    """One replica for one request (a named tuple: the router builds one per replica and request, so it is cheap)."""

    stats: ReplicaStats
    """The replica's last report (the router tops up the counts it knows better, e.g. what it sent since)."""
    queue_len: int
    """Requests running on or queued at the replica."""
    hard: bool
    """Whether the request to place is of the hard class."""


Scorer = Callable[[Candidate], float]
"""The cost of sending the request to the replica, in the scorer's own unit (its policy weight converts it into
"requests in the replica's queue"); lower is better."""
