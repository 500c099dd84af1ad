"""Reasoning economy on real vLLM engines (in this process, no Ray): samples share one prefill, an early consensus
aborts the samples still decoding, certainty exit ends the thinking of the demo model on a question it answers
consistently, and a borrowed request spends its own thinking budget on a tier that does not think for its own."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import TINY_POLICY
from thinktier.deployments.tier.answers import extract_answer
from thinktier.deployments.tier.engine import TierEngine
from thinktier.deployments.tier.protocol import TierChunk, TierRequest, collect
from thinktier.policies.loader import DEFAULT_POLICY, load_policy
from thinktier.policies.schema import EarlyExit, Tier

pytestmark = pytest.mark.integration
SAMPLES = 4


def with_engine(tier: Tier, **engine: Any) -> Tier:
    return tier.model_copy(update={"engine": tier.engine.model_copy(update=engine)})


def start(loop: asyncio.AbstractEventLoop, tier: Tier) -> TierEngine:
    async def make() -> TierEngine:
        return TierEngine("reasoning", tier)

    return loop.run_until_complete(make())


@pytest.fixture(scope="module")
def tiny(loop: asyncio.AbstractEventLoop) -> Iterator[TierEngine]:
    """The tiny random-weight model, with 32-token KV blocks (the CPU backend's smallest): vLLM shares whole blocks,
    so each sample recomputes only the prompt's last partial block."""
    engine = start(loop, with_engine(load_policy(TINY_POLICY).tiers["reasoning"], block_size=32))
    yield engine
    engine.shutdown()


def computed_prompt_tokens(engine: TierEngine) -> int:
    stats = engine.stats()
    return stats.prefix_cache_queries_total - stats.prefix_cache_hits_total


def run(loop: asyncio.AbstractEventLoop, engine: TierEngine, *requests: TierRequest) -> list[TierChunk]:
    async def go() -> list[TierChunk]:
        wholes = await asyncio.gather(*(collect(engine.generate(r)) for r in requests))
        await asyncio.sleep(0.1)  # the stat logger records the last step after its outputs are delivered
        return list(wholes)

    return loop.run_until_complete(go())


PROMPT = " ".join(f"item {i} costs {i * 7 % 13} coins;" for i in range(25)) + " What is the total?"


def test_samples_share_one_prefill_where_separate_requests_compute_it_each(
    loop: asyncio.AbstractEventLoop, tiny: TierEngine
) -> None:
    base = dict(thinking_tokens=2, answer_tokens=2, prompt=PROMPT, max_prompt_tokens=900, temperature=1.0)
    prompt_tokens = len(tiny.render_prompt(TierRequest("render", **base)))  # type: ignore[arg-type]
    assert prompt_tokens > 300

    before = computed_prompt_tokens(tiny)
    (whole,) = run(loop, tiny, TierRequest("shared", samples=SAMPLES, consensus=SAMPLES, cache_salt="a", **base))  # type: ignore[arg-type]
    shared = computed_prompt_tokens(tiny) - before
    assert whole.economy is not None and whole.economy.samples == SAMPLES
    assert whole.reasoning_tokens + whole.answer_tokens > 4  # usage counts every sample's tokens

    before = computed_prompt_tokens(tiny)
    run(loop, tiny, *(TierRequest(f"separate-{i}", cache_salt=f"b{i}", **base) for i in range(SAMPLES)))  # type: ignore[arg-type]
    separate = computed_prompt_tokens(tiny) - before

    assert shared < 1.5 * prompt_tokens, (shared, prompt_tokens)
    assert separate >= SAMPLES * prompt_tokens * 0.95, (separate, prompt_tokens)


def test_an_early_consensus_aborts_the_samples_still_decoding(loop: asyncio.AbstractEventLoop, tiny: TierEngine) -> None:
    # Random weights at temperature 1 and a common letter as a stop string: each seeded sample ends at its own length.
    # With consensus 1 the first answer decides, and the longer samples are aborted mid-decode.
    request = TierRequest("vote", thinking_tokens=96, answer_tokens=48, prompt="Count the apples.", temperature=1.0,
                          seed=7, stop=("e",), samples=SAMPLES, consensus=1)
    (whole,) = run(loop, tiny, request)
    economy = whole.economy
    assert economy is not None and economy.early_stop == "consensus"
    assert economy.samples_aborted >= 1 and economy.tokens_saved > 0
    assert whole.reasoning_tokens + whole.answer_tokens < SAMPLES * (96 + 48)
    assert tiny.engine.output_processor.get_num_unfinished_requests() == 0  # aborted in vLLM: their KV is free
    generated = tiny._stats.generation_tokens_total
    loop.run_until_complete(asyncio.sleep(0.5))
    assert tiny._stats.generation_tokens_total == generated  # nothing decodes on after the answer


def test_certainty_exit_ends_the_thinking_once_the_probes_agree(loop: asyncio.AbstractEventLoop) -> None:
    """The demo model (SmolLM2) thinks about 56 tokens on this question, greedily; its probes agree on 72 early."""
    engine = start(loop, load_policy(DEFAULT_POLICY).tiers["reasoning"])
    try:
        messages = ({"role": "system", "content": "Think step by step, then give the final answer in \\boxed{}."},
                    {"role": "user", "content": "Compute 9 * 8."})
        base = dict(thinking_tokens=256, answer_tokens=64, messages=messages, temperature=0.0)
        probing = EarlyExit(interval_tokens=8, agree=2)
        plain, early = run(loop, engine, TierRequest("plain", **base),  # type: ignore[arg-type]
                           TierRequest("early", certainty_exit=probing, **base))  # type: ignore[arg-type]
    finally:
        engine.shutdown()
    assert plain.economy is None and plain.reasoning_tokens > 32
    assert early.economy is not None and early.economy.early_stop == "certainty" and early.economy.probes >= 2
    assert early.reasoning_tokens < plain.reasoning_tokens
    assert early.economy.tokens_saved == 256 - early.reasoning_tokens
    assert extract_answer(early.content) == extract_answer(plain.content)  # the same answer, from less thinking
    assert early.finish_reason == "stop" and early.answer_tokens > 0


def test_whitespace_drift_in_a_system_prompt_renders_the_same_tokens_only_with_normalisation(tiny: TierEngine) -> None:
    def messages(system: str) -> tuple[dict[str, str], ...]:
        return ({"role": "system", "content": system}, {"role": "user", "content": "What is 2 + 2?"})

    clean = TierRequest("clean", 8, 8, messages=messages("Answer briefly.\nShow the result in \\boxed{}."))
    drifted = TierRequest("drifted", 8, 8, messages=messages("Answer briefly.  \r\nShow the result in \\boxed{}.\r\n\r\n\r\n"))
    assert tiny.tier.normalize_prompts
    assert tiny.render_prompt(drifted) == tiny.render_prompt(clean)  # one prefix: the cache serves both
    tiny.tier = tiny.tier.model_copy(update={"normalize_prompts": False})
    try:
        assert tiny.render_prompt(drifted) != tiny.render_prompt(clean)
    finally:
        tiny.tier = tiny.tier.model_copy(update={"normalize_prompts": True})


def test_a_borrowed_request_thinks_on_a_tier_whose_own_requests_do_not(
    loop: asyncio.AbstractEventLoop, tiny: TierEngine
) -> None:
    """Lending: a chat tier serving the reasoning model with its thinking off (empty_thinking) runs a reasoning tier's
    request with that request's own thinking budget; its own requests stay without thinking."""
    own_tier = tiny.tier
    tiny.tier = own_tier.model_copy(update={"thinking": False, "empty_thinking": True})
    try:
        base = dict(thinking_tokens=16, answer_tokens=8, prompt="What is 2 + 2?", temperature=0.0)
        own, borrowed = run(loop, tiny, TierRequest("own", **base),  # type: ignore[arg-type]
                            TierRequest("borrowed", borrowed=True, **base))  # type: ignore[arg-type]
    finally:
        tiny.tier = own_tier
    assert own.reasoning_tokens == 0 and own.answer_tokens > 0
    assert 0 < borrowed.reasoning_tokens <= 16 and borrowed.answer_tokens > 0
