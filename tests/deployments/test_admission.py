"""Admission and SSE framing, without a server: tenants, slots given back on every path, one event per chunk."""

from __future__ import annotations

import asyncio
import json

import pytest

from thinktier.deployments.request.admission import Admission
from thinktier.deployments.request.openai_api import APIError, SSEFramer
from thinktier.deployments.tier.protocol import TierChunk
from thinktier.policies.loader import parse_policy

POLICY = parse_policy(
    """
version: 1
tiers:
  reasoning:
    model: builtin:tiny-random
    engine: {kv_cache_memory_gib: 0.1}
routing: {chat_tier: null}
tenants:
  acme: {api_key_env: ADMISSION_TEST_KEY, max_concurrent_requests: 2}
""",
    "p.yaml",
)


def test_tenant_by_key_and_401_for_an_unknown_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADMISSION_TEST_KEY", "sk-1")
    admission = Admission()
    assert admission.tenant(POLICY, "Bearer sk-1") == "acme"
    for unknown in ("Bearer sk-wrong", ""):  # a policy with tenants serves no anonymous request unless it says so
        with pytest.raises(APIError) as err:
            admission.tenant(POLICY, unknown)
        assert err.value.status == 401


def test_slots_are_given_back_on_every_exit_path() -> None:
    admission = Admission()

    async def paths() -> None:
        async with admission.slot(POLICY, "acme"):
            pass
        with pytest.raises(ValueError):
            async with admission.slot(POLICY, "acme"):
                raise ValueError("a failing request")

        async def cancelled() -> None:
            async with admission.slot(POLICY, "acme"):
                await asyncio.sleep(10)

        task = asyncio.ensure_future(cancelled())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        first, second = admission.slot(POLICY, "acme"), admission.slot(POLICY, "acme")
        with pytest.raises(APIError) as full:
            admission.slot(POLICY, "acme")
        assert full.value.status == 429 and full.value.headers == {"Retry-After": "1"}
        first.release()
        first.release()  # at most once
        second.release()
        admission.slot(POLICY, "acme").release()

    asyncio.run(paths())


def test_a_coalesced_chunk_is_one_event_and_usage_follows_the_last() -> None:
    framer = SSEFramer(chat=True, request_id="chatcmpl-1", model="m", include_usage=True)
    events = framer.events(TierChunk(reasoning="so ", content="42", finish_reason="stop", reasoning_tokens=2, answer_tokens=1))
    bodies = [json.loads(line.removeprefix("data: ")) for line in events.split("\n\n") if line]
    assert len(bodies) == 2
    assert bodies[0]["choices"][0]["delta"] == {"reasoning": "so ", "reasoning_content": "so ", "content": "42"}
    assert bodies[0]["choices"][0]["finish_reason"] == "stop"
    assert bodies[1]["choices"] == [] and bodies[1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2}
    assert json.loads(framer.start().removeprefix("data: "))["choices"][0]["delta"]["role"] == "assistant"
