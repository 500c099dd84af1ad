"""Tiers that lend idle capacity to each other's requests, instead of cutting budgets while capacity idles.

Modelled on cluster schedulers' elastic queues (Kueue cohorts with borrowing limits, YARN's capacity scheduler): a
tier whose replicas are all busy may run a request on another tier that has room, up to a share of that tier's decode
slots. A borrowed request keeps its own budget and runs at the lender's lowest vLLM priority, so the lender's own
requests are scheduled first and a borrowed request is the first preempted when the lender's own work arrives.
"""

from __future__ import annotations

from pydantic import Field

from thinktier.policies.schema.base import StrictModel


class Lending(StrictModel):
    """One tier lending capacity to another tier's requests (one direction; add a second rule for the other)."""

    lender: str = Field(description="Tier whose idle capacity is lent.")
    borrower: str = Field(description="Tier whose requests may run on the lender when its own replicas are busy.")
    max_share: float = Field(
        0.5, gt=0, le=1,
        description="Most of the lender's decode slots (engine.max_num_seqs x its live replicas) that borrowed requests "
        "may hold at once, as the lender's replicas last reported them.",
    )
    lend_below_kv_occupancy: float = Field(
        0.5, gt=0, le=1,
        description="The lender lends while one of its replicas has less KV in use than this, no request waiting, and "
        "fewer ongoing requests than lend_below_ongoing_requests where that is set.",
    )
    lend_below_ongoing_requests: int | None = Field(
        None, ge=1,
        description="Also needed of a lending replica: fewer ongoing requests (running and waiting) than this. For "
        "engines bound by compute rather than KV (CPUs), where KV stays nearly empty while requests slow down.",
    )
    borrow_above_kv_occupancy: float = Field(
        0.9, gt=0, le=1,
        description="The borrower borrows when every replica of its tier has at least this much KV in use or a request "
        "waiting (none could start the request now), or holds borrow_above_ongoing_requests where that is set.",
    )
    borrow_above_ongoing_requests: int | None = Field(
        None, ge=1,
        description="The borrower also counts as busy when every replica holds at least this many ongoing requests "
        "(running and waiting): a compute-bound engine slows every request down before its KV fills.",
    )
