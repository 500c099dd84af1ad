"""Thinking budgets end the section exactly at the budget: the project's logits processor on its own (batch moves,
vLLM's async placeholders, a section the model closed itself, the whole close forced), and both processors on a real
vLLM engine."""

from __future__ import annotations

import asyncio

import pytest
import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

from tests.conftest import TINY_POLICY
from thinktier.deployments.tier.engine import TierEngine
from thinktier.deployments.tier.protocol import TierRequest, collect
from thinktier.deployments.tier.thinking import THINKING_BUDGET_ARG
from thinktier.deployments.tier.thinking_budget import PLACEHOLDER, ThinkingBudgetProcessor
from thinktier.policies.loader import load_policy
from thinktier.policies.schema import BudgetProcessor

END = 7
BLANK = 9
"""The blank line the close forces after the end token."""
VOCAB = 16


def budget(tokens: int, close: tuple[int, ...] = (END,)) -> SamplingParams:
    return SamplingParams(extra_args={THINKING_BUDGET_ARG: {"tokens": tokens, "close_ids": list(close)}})


def forced(processor: ThinkingBudgetProcessor, rows: int) -> dict[int, int]:
    """The rows whose logits allow one token only, and that token."""
    logits = processor.apply(torch.zeros(rows, VOCAB))
    allowed = [torch.nonzero(~torch.isinf(logits[row])).flatten().tolist() for row in range(rows)]
    return {row: only[0] for row, only in enumerate(allowed) if len(only) == 1}


def forced_rows(processor: ThinkingBudgetProcessor, rows: int) -> list[int]:
    """Rows whose logits allow only the end token."""
    return [row for row, token in forced(processor, rows).items() if token == END]


def added(*entries: tuple[int, SamplingParams, list[int]]) -> BatchUpdate:
    return BatchUpdate(batch_size=len(entries), removed=[], added=[(i, p, None, out) for i, p, out in entries], moved=[])


def test_the_end_token_is_forced_once_the_budget_is_spent_and_never_after_the_section_ends() -> None:
    processor = ThinkingBudgetProcessor(None, torch.device("cpu"), False)  # type: ignore[arg-type]
    short, long, other = [1, 2], [1], [1, 2, 3]
    processor.update_state(added((0, budget(2), short), (1, budget(3), long), (2, SamplingParams(), other)))
    assert forced_rows(processor, 3) == [0]  # two thinking tokens out: the third is the end token
    short.append(END)
    long += [2, 3]
    assert forced_rows(processor, 3) == [1]  # the short section ended; the long one spent its three
    long += [4, 5]  # it did not take the end token (another processor's choice): forcing goes on
    assert forced_rows(processor, 3) == [1]
    long.append(END)
    assert forced_rows(processor, 3) == []


def test_sections_follow_their_requests_through_batch_moves_and_async_placeholders() -> None:
    processor = ThinkingBudgetProcessor(None, torch.device("cpu"), False)  # type: ignore[arg-type]
    first, second = [1, 2, 3], [1]
    processor.update_state(added((0, budget(3), first), (1, budget(2), second)))
    processor.update_state(BatchUpdate(batch_size=2, removed=[], added=[], moved=[(0, 1, MoveDirectionality.SWAP)]))
    assert forced_rows(processor, 2) == [1]  # the spent request now sits in row 1
    second.append(PLACEHOLDER)  # sampled but not yet copied back: not a thinking token yet
    assert forced_rows(processor, 2) == [1]
    second[-1] = END  # the placeholder becomes the end token in place
    second.append(PLACEHOLDER)
    processor.update_state(BatchUpdate(batch_size=1, removed=[1], added=[], moved=[]))
    assert forced_rows(processor, 2) == []  # the spent request left; the other one's section ended


def test_a_request_resumed_after_preemption_with_its_section_closed_is_not_forced() -> None:
    processor = ThinkingBudgetProcessor(None, torch.device("cpu"), False)  # type: ignore[arg-type]
    processor.update_state(added((0, budget(2), [1, 2, END, 4])))
    assert forced_rows(processor, 1) == []


def test_the_whole_close_is_forced_token_by_token_then_the_model_answers() -> None:
    processor = ThinkingBudgetProcessor(None, torch.device("cpu"), False)  # type: ignore[arg-type]
    output = [1, 2]
    processor.update_state(added((0, budget(2, (END, BLANK)), output)))
    assert forced(processor, 1) == {0: END}
    output.append(END)
    assert forced(processor, 1) == {0: BLANK}  # the blank line the model writes after a section it ends itself
    output.append(BLANK)
    assert forced(processor, 1) == {}  # the answer is the model's own


def test_under_async_scheduling_the_close_goes_on_by_position_while_its_tokens_are_placeholders() -> None:
    """vLLM 0.24 applies the processor for a step before the last step's token is copied back: the end token forced
    last step is a placeholder then, and must not be forced a second time."""
    processor = ThinkingBudgetProcessor(None, torch.device("cpu"), False)  # type: ignore[arg-type]
    output = [1, 2, PLACEHOLDER]  # the third thinking token is in flight
    processor.update_state(added((0, budget(3, (END, BLANK)), output)))
    assert forced(processor, 1) == {}  # two tokens known: within the budget
    output[-1] = 3
    output.append(PLACEHOLDER)  # the fourth token, sampled while only two were known
    assert forced(processor, 1) == {0: END}  # three known thinking tokens: the budget is spent
    output.append(PLACEHOLDER)  # the forced end token, not yet copied back
    assert forced(processor, 1) == {0: BLANK}  # not the end token a second time
    output[3:] = [4, END, PLACEHOLDER]
    assert forced(processor, 1) == {}  # the whole close is out
    output[-1] = BLANK
    assert forced(processor, 1) == {}


def test_a_request_that_sets_the_end_token_aside_is_forced_again_from_the_end_token() -> None:
    processor = ThinkingBudgetProcessor(None, torch.device("cpu"), False)  # type: ignore[arg-type]
    output = [1]
    processor.update_state(added((0, budget(1, (END, BLANK)), output)))
    assert forced(processor, 1) == {0: END}
    output.append(4)  # another processor chose otherwise
    assert forced(processor, 1) == {0: END}
    output.append(END)
    assert forced(processor, 1) == {0: BLANK}


def test_an_invalid_budget_argument_is_refused_with_its_shape() -> None:
    ThinkingBudgetProcessor.validate_params(budget(0))
    for arg in ({"tokens": -1, "close_ids": [END]}, {"tokens": 3, "close_ids": []}, {"tokens": 3, "end_id": END}):
        with pytest.raises(ValueError, match="'tokens': int >= 0, 'close_ids'"):
            ThinkingBudgetProcessor.validate_params(SamplingParams(extra_args={THINKING_BUDGET_ARG: arg}))


@pytest.mark.integration
@pytest.mark.parametrize("processor", ["thinktier", "vllm"])
def test_a_real_engine_ends_every_section_of_a_batch_at_its_own_budget(
    loop: asyncio.AbstractEventLoop, processor: BudgetProcessor
) -> None:
    tier = load_policy(TINY_POLICY).tiers["reasoning"]
    tier = tier.model_copy(update={"engine": tier.engine.model_copy(update={"thinking_budget_processor": processor})})
    budgets = [1, 5, 17, 40, 3, 64]

    async def run() -> list[tuple[int, bool, int]]:
        engine = TierEngine("reasoning", tier)
        try:
            requests = [
                TierRequest(request_id=f"r{i}", thinking_tokens=b, answer_tokens=4, prompt=f"question {i}", seed=i)
                for i, b in enumerate(budgets)
            ]
            totals = await asyncio.gather(*(collect(engine.generate(r)) for r in requests))
            return [(t.reasoning_tokens, t.budget_forced, t.answer_tokens) for t in totals]
        finally:
            engine.shutdown()

    results = loop.run_until_complete(run())
    # the tiny random model never writes the end token itself: every section ends at its budget, then an answer
    assert [(tokens, forced) for tokens, forced, _ in results] == [(b, True) for b in budgets]
    assert all(0 < answer <= 4 for _, _, answer in results)
