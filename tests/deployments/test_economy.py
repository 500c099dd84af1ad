"""Reasoning economy without an engine: the vote over samples, certainty probing, prompt normalisation, and how the
policy and the request set them (the engine-level tests are in tests/deployments/test_economy_engine.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from thinktier.deployments.request import openai_api as oa
from thinktier.deployments.request.decision import RoutingRequest
from thinktier.deployments.request.routing import budget_decision
from thinktier.deployments.tier import self_consistency
from thinktier.deployments.tier.certainty import CertaintyTracker, probe_answer
from thinktier.deployments.tier.prompts import normalize_messages
from thinktier.deployments.tier.protocol import Economy, TierChunk, TierRequest, collect
from thinktier.deployments.tier.self_consistency import Vote
from thinktier.policies.loader import parse_policy
from thinktier.policies.schema import DYNASOR_PROBE, Budget, EarlyExit


class FakeSamples:
    """Decodes whose answers and lengths are given per sample; records which were cancelled before their end."""

    def __init__(self, answers: list[str], steps: list[int], step_s: float = 0.01) -> None:
        self.answers, self.steps, self.step_s = answers, steps, step_s
        self.cancelled: set[int] = set()
        self.seeds: dict[int, int | None] = {}

    async def decode(self, request: TierRequest) -> AsyncIterator[TierChunk]:
        index = int(request.request_id.rsplit("-s", 1)[1])
        self.seeds[index] = request.seed
        done = False
        try:
            for step in range(self.steps[index]):
                await asyncio.sleep(self.step_s)
                yield TierChunk(reasoning=f"[{index}:{step}]", reasoning_tokens=step + 1)
            yield TierChunk(content=f"The answer is {self.answers[index]}.", finish_reason="stop", prompt_tokens=10,
                            reasoning_tokens=self.steps[index], answer_tokens=5)
            done = True
        finally:
            if not done:
                self.cancelled.add(index)


def request(samples: int, consensus: int, progress: bool = False, seed: int | None = 100) -> TierRequest:
    return TierRequest("r", thinking_tokens=50, answer_tokens=10, samples=samples, consensus=consensus,
                       progress=progress, seed=seed)


def vote(fake: FakeSamples, req: TierRequest) -> tuple[list[TierChunk], TierChunk]:
    async def run() -> list[TierChunk]:
        return [chunk async for chunk in Vote(req, fake.decode, None).stream()]

    chunks = asyncio.run(run())
    return chunks[:-1], chunks[-1]


def test_the_majority_answer_wins_and_usage_counts_every_sample() -> None:
    fake = FakeSamples(["42", "41", "42.0", "\\frac{84}{2}"], steps=[3, 4, 5, 6])
    _, last = vote(fake, request(samples=4, consensus=4))
    assert last.economy is not None
    assert last.economy.votes == {"42": 3, "41": 1}  # 42.0 and 84/2 are 42 written otherwise
    assert last.economy.majority and last.economy.samples_aborted == 0 and last.economy.early_stop is None
    assert last.content == "The answer is 42."
    assert last.reasoning_tokens == 3 + 4 + 5 + 6 and last.answer_tokens == 4 * 5
    assert fake.seeds == {0: 100, 1: 101, 2: 102, 3: 103}  # each sample its own seed, reproducibly


def test_early_consensus_cancels_the_samples_still_decoding_and_counts_what_they_saved() -> None:
    fake = FakeSamples(["7", "7", "7", "3"], steps=[2, 3, 4, 40])
    _, last = vote(fake, request(samples=4, consensus=3))
    assert last.economy is not None
    assert last.economy.early_stop == "consensus" and last.economy.samples_aborted == 1
    assert fake.cancelled == {3}  # the slow sample's decode was cancelled (the engine aborts it)
    assert last.economy.votes == {"7": 3}
    assert 0 < last.economy.tokens_saved <= 60  # its unspent budget: thinking 50 + answer 10, less what it decoded
    assert last.reasoning_tokens < 2 + 3 + 4 + 40


def staged(samples: int, consensus: int) -> TierRequest:
    return TierRequest("r", thinking_tokens=50, answer_tokens=10, samples=samples, consensus=consensus, staged=True,
                       progress=False, seed=100)


def test_staged_samples_that_agree_cost_consensus_samples_and_never_start_the_rest() -> None:
    fake = FakeSamples(["7"] * 8, steps=[3] * 8)
    _, last = vote(fake, staged(samples=8, consensus=3))
    assert last.economy is not None
    assert set(fake.seeds) == {0, 1, 2}  # only three decodes ever reached the engine
    assert last.economy.samples == 3 and last.economy.samples_aborted == 0 and last.economy.votes == {"7": 3}
    assert last.economy.early_stop == "consensus" and last.economy.tokens_saved == 5 * (50 + 10)
    assert last.reasoning_tokens == 3 * 3


def test_a_staged_vote_starts_another_sample_only_when_those_running_can_no_longer_agree() -> None:
    # 0, 1 and 2 start; when 1 disagrees, 0 has answered 7 and only 2 is still running, so 7 could reach 2 votes at
    # most: 3 starts, 2 and 3 agree with 0, and the vote ends with 4 of 8 samples decoded
    fake = FakeSamples(["7", "9", "7", "7", "9", "9", "9", "9"], steps=[2, 3, 4, 2, 2, 2, 2, 2])
    _, last = vote(fake, staged(samples=8, consensus=3))
    assert last.economy is not None
    assert set(fake.seeds) == {0, 1, 2, 3} and fake.seeds[3] == 103  # the late sample keeps its own seed
    assert last.economy.votes == {"7": 3, "9": 1} and last.content == "The answer is 7."
    assert last.economy.samples == 4 and last.economy.early_stop == "consensus"


def test_a_staged_vote_that_never_agrees_decodes_every_sample_and_answers_with_the_largest_group() -> None:
    fake = FakeSamples(["1", "2", "3", "1", "4"], steps=[1, 1, 1, 1, 1])
    _, last = vote(fake, staged(samples=5, consensus=3))
    assert last.economy is not None
    assert set(fake.seeds) == {0, 1, 2, 3, 4} and last.economy.samples == 5
    assert last.economy.early_stop is None and last.economy.votes == {"1": 2, "2": 1, "3": 1, "4": 1}


def test_no_majority_is_reported_and_the_largest_group_still_answers() -> None:
    fake = FakeSamples(["1", "2", "2", "3", "4"], steps=[1, 2, 3, 4, 5])
    _, last = vote(fake, request(samples=5, consensus=5))
    assert last.economy is not None and last.economy.votes is not None
    assert not last.economy.majority and last.content == "The answer is 2."


def test_a_streamed_vote_shows_one_samples_reasoning_as_progress_then_the_answer() -> None:
    fake = FakeSamples(["5", "5"], steps=[3, 3])
    progress, last = vote(fake, request(samples=2, consensus=2, progress=True))
    assert [c.reasoning for c in progress] == ["[0:0]", "[0:1]", "[0:2]"]
    assert all(not c.content for c in progress) and last.reasoning == "" and last.content == "The answer is 5."
    _, whole = vote(FakeSamples(["5", "5"], steps=[3, 3]), request(samples=2, consensus=2, progress=False))
    assert whole.reasoning == "[0:0][0:1][0:2]"  # not streamed: the chosen sample's own reasoning


def test_a_streamed_vote_keeps_its_stream_alive_while_the_other_samples_think(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(self_consistency, "HEARTBEAT_S", 0.05)
    fake = FakeSamples(["5", "5"], steps=[2, 40])  # sample 1 thinks for 0.4 s after sample 0's reasoning has ended
    progress, last = vote(fake, request(samples=2, consensus=2, progress=True))
    keep_alive = [c for c in progress if not c.reasoning]
    assert [c.reasoning for c in progress if c.reasoning] == ["[0:0]", "[0:1]"] and 3 <= len(keep_alive) < 20
    assert last.content == "The answer is 5."
    framer = oa.SSEFramer(chat=True, request_id="chatcmpl-1", model="m", include_usage=False)
    assert framer.events(keep_alive[0]) == oa.SSE_KEEP_ALIVE == ": keep-alive\n\n"  # a comment: clients skip it


def test_a_failing_sample_fails_the_vote_and_stops_the_others() -> None:
    fake = FakeSamples(["1", "1", "1"], steps=[2, 50, 50])

    async def decode(req: TierRequest) -> AsyncIterator[TierChunk]:
        if req.request_id.endswith("-s0"):
            raise RuntimeError("engine died")
        async for chunk in fake.decode(req):
            yield chunk

    async def run() -> None:
        await collect(Vote(request(samples=3, consensus=2), decode, None).stream())

    with pytest.raises(RuntimeError, match="engine died"):
        asyncio.run(run())
    assert fake.cancelled == {1, 2}


def test_free_text_answers_agree_by_embedding_similarity() -> None:
    vectors = {"Paris.": [1.0, 0.0], "It is Paris": [0.96, 0.28], "Lyon": [0.0, 1.0]}

    async def embed(texts: list[str]) -> list[list[float]]:
        return [vectors[t] for t in texts]

    class Text(FakeSamples):
        async def decode(self, req: TierRequest) -> AsyncIterator[TierChunk]:
            index = int(req.request_id.rsplit("-s", 1)[1])
            await asyncio.sleep(0.01 * (index + 1))
            yield TierChunk(content=self.answers[index], finish_reason="stop")

    async def run(threshold: float | None) -> TierChunk:
        req = TierRequest("r", 5, 5, samples=3, consensus=3, text_similarity=threshold, progress=False)
        return await collect(Vote(req, Text(["Paris.", "It is Paris", "Lyon"], [1, 1, 1]).decode, embed).stream())

    assert asyncio.run(run(0.9)).economy == Economy(samples=3, votes={"Paris.": 2, "Lyon": 1}, majority=True)
    assert asyncio.run(run(None)).economy.votes == {"Paris.": 1, "It is Paris": 1, "Lyon": 1}  # type: ignore[union-attr]


def test_certainty_needs_consecutive_equal_answers_every_interval() -> None:
    tracker = CertaintyTracker(EarlyExit(interval_tokens=8, agree=3))
    assert not tracker.due(7) and tracker.due(8)
    assert not tracker.record("12", 8) and not tracker.due(15) and tracker.due(16)
    assert not tracker.record("13", 16)
    assert not tracker.record("13", 24)
    assert tracker.record("13.0", 32)  # three in a row, one value
    assert tracker.probes == 4
    assert not CertaintyTracker(EarlyExit(agree=2)).record(None, 64)


def test_a_probe_reads_the_answer_the_model_writes_into_the_opened_box() -> None:
    assert probe_answer(DYNASOR_PROBE, "72} \\]\n\nSo the") == "72"
    assert probe_answer(DYNASOR_PROBE, "\\frac{1}{2}") == "\\frac{1}{2}"  # cut before the box closed


def test_whitespace_drift_in_shared_messages_is_normalised_and_the_question_is_left_alone() -> None:
    drifted = [{"role": "system", "content": "Be brief.  \r\nUse \\boxed{}.\r\n\r\n\r\n\r\nThanks\n"},
               {"role": "user", "content": "  What is 2+2?  "}]
    clean = [{"role": "system", "content": "Be brief.\nUse \\boxed{}.\n\nThanks"},
             {"role": "user", "content": "  What is 2+2?  "}]
    assert normalize_messages(drifted) == clean
    code = [{"role": "system", "content": "def f():\n    return  1"}, {"role": "user", "content": "?"}]
    assert normalize_messages(code) == code  # indentation and inner spaces mean something


POLICY = parse_policy("""
version: 1
tiers:
  reasoning:
    model: builtin:tiny-random
    engine: {kv_cache_memory_gib: 0.05}
    early_exit: {agree: 3}
    budgets:
      low: {thinking_tokens: 64, answer_tokens: 32, early_exit: true}
      medium: {thinking_tokens: 128, answer_tokens: 32, samples: 8}
      high: {thinking_tokens: 256, answer_tokens: 32, samples: 4, consensus: 2, staged: false}
routing: {chat_tier: null}
""")


def decide(effort: str, **asked: object) -> tuple[int, int, int | None]:
    d = budget_decision(POLICY, RoutingRequest(prompt="x", **asked), "reasoning", effort, "request_effort", None)  # type: ignore[arg-type]
    return d.samples, d.consensus, d.certainty_agree


def test_the_policy_sets_samples_consensus_and_certainty_and_a_request_only_narrows_them() -> None:
    assert decide("medium") == (8, 5, None)  # consensus unset: a strict majority of 8
    assert decide("medium", samples=3) == (3, 2, None)  # fewer samples by request: majority of those
    assert decide("medium", samples=40) == (8, 5, None)  # never more than the policy
    assert decide("high") == (4, 2, None)
    assert decide("high", early_stop=False) == (4, 4, None)  # every sample to its end
    assert decide("low") == (1, 1, 3)
    assert decide("low", early_stop_agree=5) == (1, 1, 5)  # stricter than the policy
    assert decide("low", early_stop_agree=2) == (1, 1, 3)  # never looser
    assert decide("low", early_stop=False) == (1, 1, None)
    assert decide("low", thinking_off=True)[2] is None  # nothing to exit from


def test_staged_sampling_comes_from_the_budget_and_only_where_samples_may_stop_early() -> None:
    def staged_of(effort: str, **asked: object) -> bool:
        return budget_decision(POLICY, RoutingRequest(prompt="x", **asked), "reasoning", effort,  # type: ignore[arg-type]
                               "request_effort", None).staged

    assert staged_of("medium") and not staged_of("high")  # on by default; high turns it off
    assert not staged_of("medium", early_stop=False)  # every sample to its end: all start together
    assert not staged_of("medium", samples=1)  # one sample: nothing to leave unstarted


def test_consensus_above_samples_is_a_policy_error() -> None:
    with pytest.raises(ValueError, match=r"consensus \(5\) must not exceed samples \(4\)"):
        Budget(thinking_tokens=1, answer_tokens=1, samples=4, consensus=5)


def test_requests_ask_for_samples_and_early_stop_within_bounds() -> None:
    def parse(**body: object) -> oa.ChatCompletionRequest:
        raw = json.dumps({"model": "thinktier", "messages": [{"role": "user", "content": "hi"}], **body}).encode()
        return oa.parse_request(raw, oa.ChatCompletionRequest)

    assert parse(samples=4, early_stop_agree=4).early_stop_agree == 4
    assert parse(early_stop=False).early_stop is False
    for body, field in (({"samples": 17}, "samples"), ({"samples": 0}, "samples"), ({"early_stop_agree": 1},
                        "early_stop_agree"), ({"early_stop": "sometimes"}, "early_stop")):
        with pytest.raises(oa.APIError) as err:
            parse(**body)
        assert err.value.status == 400 and err.value.body["error"]["param"] == field


def test_votes_reach_the_response_body_headers_and_the_last_stream_event() -> None:
    whole = TierChunk(content="42", finish_reason="stop", prompt_tokens=3, reasoning_tokens=40, answer_tokens=8,
                      economy=Economy(samples=4, samples_aborted=1, votes={"42": 3}, early_stop="consensus"))
    body = oa.chat_completion("id", "m", whole)
    assert body["votes"] == {"42": 3} and body["early_stop"] == "consensus"
    assert body["usage"]["completion_tokens"] == 48  # every sample's tokens
    assert oa.economy_headers(whole) == {"votes": '{"42": 3}', "samples-aborted": "1", "early-stop": "consensus"}
    event = oa.SSEFramer(chat=True, request_id="id", model="m", include_usage=False).events(whole)
    assert json.loads(event.removeprefix("data: "))["votes"] == {"42": 3}
    assert oa.economy_fields(TierChunk(content="x", finish_reason="stop")) == {}
