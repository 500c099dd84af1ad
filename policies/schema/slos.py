"""Latency objectives per difficulty class, the measure of goodput."""

from __future__ import annotations

from pydantic import Field, model_validator

from thinktier.policies.schema.base import DifficultyClass, StrictModel


class SLO(StrictModel):
    """Latency objectives of one difficulty class; goodput counts requests that meet both."""

    ttfvt_s: float = Field(gt=0, description="Time to first visible (answer) token, seconds.")
    e2e_s: float = Field(gt=0, description="Request start to last token, seconds.")

    @model_validator(mode="after")
    def _ordered(self) -> SLO:
        if self.ttfvt_s > self.e2e_s:
            raise ValueError(f"ttfvt_s: {self.ttfvt_s:g} s exceeds e2e_s ({self.e2e_s:g} s): the first visible token "
                             "cannot come after the last; lower ttfvt_s or raise e2e_s")
        return self

    def met(self, ttfvt_s: float | None, e2e_s: float | None) -> bool:
        """Whether a request with these latencies meets both objectives; one that never showed an answer token
        (`ttfvt_s` None) or never finished (`e2e_s` None) misses."""
        return ttfvt_s is not None and e2e_s is not None and ttfvt_s <= self.ttfvt_s and e2e_s <= self.e2e_s


def default_slos() -> dict[DifficultyClass, SLO]:
    """The objectives of a policy that sets none."""
    return {
        "easy": SLO(ttfvt_s=2, e2e_s=10),
        "medium": SLO(ttfvt_s=20, e2e_s=60),
        "hard": SLO(ttfvt_s=60, e2e_s=180),
    }
