"""What one request of an effort level may spend, and how its thinking may end early: budgets, early exit, voting."""

from __future__ import annotations

from pydantic import Field, model_validator

from thinktier.policies.schema.base import Effort, StrictModel


class Budget(StrictModel):
    """What one request of an effort level may spend."""

    thinking_tokens: int = Field(ge=0, description="Most thinking tokens; at the cap the engine closes the thinking.")
    answer_tokens: int = Field(ge=1, description="Most visible answer tokens.")
    samples: int = Field(
        1, ge=1, le=16,
        description="Self-consistency: this many samples of the prompt (one prefill, shared through the prefix cache) "
        "vote on the answer; 1 decodes once.",
    )
    consensus: int | None = Field(
        None, ge=1, le=16,
        description="Early consensus: once this many samples agree, the others are aborted and their KV freed (with "
        "staged, those not yet started never start). A strict majority of samples when unset (3 of 4); equal to "
        "samples, every sample runs to its end.",
    )
    staged: bool = Field(
        True,
        description="Adaptive self-consistency: start only consensus samples, and another only when the samples still "
        "decoding can no longer bring the leading answer to consensus. Where samples agree, the vote costs consensus "
        "samples instead of all of them; where they disagree, the answer comes later (an extra sample starts after "
        "an earlier one ended). On by default from the data: on the project's reasoner (8 samples, 3 agreeing, 30 "
        "problems, loadtest/results/economy/cpu-reasoner-small) staged votes spent 56 % fewer tokens than all 8 "
        "samples (12 % for the samples started together), with the same voted answer on every problem; each vote's "
        "wall time on an idle engine was 0.88x the together vote's at the median and 1.58x at the 90th percentile.",
    )
    early_exit: bool = Field(
        False,
        description="Certainty-based early exit for one-sample decodes: probe the answer every early_exit.interval_tokens "
        "thinking tokens and end the thinking once the last early_exit.agree probes agree (the tier's early_exit).",
    )

    @model_validator(mode="after")
    def _consensus_within_samples(self) -> Budget:
        if self.consensus is not None and self.consensus > self.samples:
            raise ValueError(f"consensus ({self.consensus}) must not exceed samples ({self.samples})")
        return self

    def consensus_of(self, samples: int) -> int:
        """How many agreeing samples end a self-consistent decode of `samples` (the budget's, or fewer by request)."""
        return min(self.consensus, samples) if self.consensus else samples // 2 + 1


def default_budgets() -> dict[Effort, Budget]:
    """The budgets of a tier whose policy sets none."""
    return {
        "low": Budget(thinking_tokens=256, answer_tokens=256),
        "medium": Budget(thinking_tokens=1024, answer_tokens=512),
        "high": Budget(thinking_tokens=4096, answer_tokens=1024),
    }


DYNASOR_PROBE = "... Oh, I suddenly got the answer to the whole problem, **Final Answer**\n\n\\[ \\boxed{"
"""The probe of Dynasor's certainty-based early exit: after it, models write their current final answer."""


class EarlyExit(StrictModel):
    """Certainty-based early exit (Dynasor): probe the current answer during thinking, in a short side request that shares
    the prefix; once the probes agree, close the thinking and let the model answer."""

    interval_tokens: int = Field(
        32, ge=4,
        description="Thinking tokens between two probes. 32 from the data: on the project's reasoner (30 problems, "
        "loadtest/results/economy/cpu-reasoner-small-probe32-agree3) probes every 32 tokens, 3 agreeing, ended 26 % "
        "of the thinking with no answer changed, against 19 % every 64 tokens; they cost 12.8 probes per decode "
        "against 6.9 (side requests of at most probe_tokens each, not counted in the saving). On a model whose "
        "thinking does not settle (the 135M demo model) they fired on 3 of 30 prompts and changed 2 answers.",
    )
    agree: int = Field(3, ge=2, le=16, description="End the thinking when this many consecutive probes give one answer.")
    probe: str = Field(DYNASOR_PROBE, min_length=1, description="Text appended to the thinking so far to ask for the answer.")
    probe_tokens: int = Field(16, ge=1, le=256, description="Most tokens a probe may generate.")


class Voting(StrictModel):
    """How self-consistency samples' answers are compared."""

    text_similarity: float | None = Field(
        0.9, gt=0, le=1,
        description="Free-text answers (not numbers) agree at this cosine similarity of the difficulty classifier's "
        "embeddings; null compares them as normalised text only. Math answers compare by value (1/2 = 0.5 = \\frac{1}{2}).",
    )
