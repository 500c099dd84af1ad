"""The reasoner's two sizes: the model, the difficulty of its task family and its training run, per size."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from thinktier.training.reasoner.corpus import CorpusMix
from thinktier.training.reasoner.tasks import Difficulty

SizeName = Literal["small", "large"]


@dataclass(frozen=True)
class ModelShape:
    """A Llama decoder (an architecture vLLM serves unchanged; train.py says which variant). Head size 32: vLLM's CPU
    attention needs 32 or 64."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    context: int


@dataclass(frozen=True)
class TrainingRun:
    steps: int
    tokens_per_step: int
    learning_rate: float
    warmup_steps: int
    max_count: int
    """Longest chain trained on: a little past the hard class, so the hardest problems are not at the edge."""
    slip_rate: float
    """Chance that one column's sum is off by one in a trace: lower for longer chains, so hard accuracy stays high
    (sampling at temperature 0.6 sharpens it about tenfold) while samples still slip at different steps. The large's
    first models, at 0.006, were 95-97 % right on hard problems, which left a vote of 5 at most 5 points to add; at 0.012
    one sample was 83-88 % right on 90-120-step chains; at 0.010 on 105-135 steps 80-93 % (two bench seeds), and the
    vote added 2 and 7 points. A vote of 5 adds 10 points only if one sample is at most about 88 % right (independent
    samples: 0.88 -> 0.986); at 0.012 on 105-135 steps, five bench seeds pooled: one sample 84 % right with full
    thinking, 88 % on the voted problems, voted 100 % (loadtest/results/reasoner-large/)."""
    restate_result: bool = False
    """Check lines restate the result they check (traces.TraceSettings.restate_result). For the large size's long
    checks: its first model worked 10-30-step chains right, then answered with another number after the check (2 of
    4 medium samples read at temperature 0.6 erred there and nowhere else)."""
    mix: CorpusMix = field(default_factory=CorpusMix)


@dataclass(frozen=True)
class ReasonerSize:
    name: SizeName
    shape: ModelShape
    difficulty: Difficulty
    run: TrainingRun


LARGE_MIX = CorpusMix(chat=0.15, off=0.45, cut=0.12, probe=0.08, short_chains=0.3, learn_after_forced_close=True)
"""Batches are filled by tokens, so a kind's share of the optimizer steps is its share of the tokens, not of the
examples. The large size's chains run to 125 steps, so at the default mix its one-step thinking-off examples were
0.26 % of the tokens (about 5 steps' worth of 2,036; the small's: 32 of 4,000) and its chat 0.09 %: it never learned
to answer without thinking. At this mix they are 2.2 % and 0.6 %, and forced ends (cut examples) 20 % instead of 12 %
(its first models answered after 75 % of forced ends). Measured with a seeded draw of 3,000 examples. With these
shares alone (loadtest/results/reasoner-large/, an H100's 1,689 steps) it stopped two-step chains after one step (easy
83 %): about 190 of its worked examples had one or two steps; short chains at 0.3 make that about 3,100."""

SIZES: dict[SizeName, ReasonerSize] = {
    "small": ReasonerSize(
        name="small",
        shape=ModelShape(hidden=192, layers=6, heads=6, intermediate=768, context=4096),
        difficulty=Difficulty(easy=(1, 2), medium=(5, 10), hard=(22, 32)),
        run=TrainingRun(steps=4000, tokens_per_step=32768, learning_rate=2e-3, warmup_steps=100, max_count=35,
                        slip_rate=0.03),
    ),
    "large": ReasonerSize(
        name="large",
        shape=ModelShape(hidden=512, layers=6, heads=16, intermediate=2048, context=12288),
        difficulty=Difficulty(easy=(1, 2), medium=(10, 30), hard=(105, 135)),
        run=TrainingRun(steps=3000, tokens_per_step=65536, learning_rate=1e-3, warmup_steps=100, max_count=140,
                        slip_rate=0.012, restate_result=True, mix=LARGE_MIX),
    ),
}
