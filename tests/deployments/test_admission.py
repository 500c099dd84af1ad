"""Admission and SSE framing, without a server: tenants, slots given back on every path, one event per chunk."""

from __future__ import annotations

import asyncio
import json

import pytest

from thinktier.deployments.request.admission import Admission, SharedSlots
from thinktier.deployments.request.load_board import LoadBoard
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
        async with await admission.slot(POLICY, "acme"):
            pass
        with pytest.raises(ValueError):
            async with await admission.slot(POLICY, "acme"):
                raise ValueError("a failing request")

        async def cancelled() -> None:
            async with await admission.slot(POLICY, "acme"):
                await asyncio.sleep(10)

        task = asyncio.ensure_future(cancelled())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        first, second = await admission.slot(POLICY, "acme"), await admission.slot(POLICY, "acme")
        with pytest.raises(APIError) as full:
            await admission.slot(POLICY, "acme")
        assert full.value.status == 429 and full.value.headers == {"Retry-After": "1"}
        first.release()
        first.release()  # at most once
        second.release()
        (await admission.slot(POLICY, "acme")).release()

    asyncio.run(paths())


class _Board:
    """Two Ingress replicas' view of one real LoadBoard (its methods called directly, as Serve would one at a time)."""

    def __init__(self, stale_after_s: float = 60) -> None:
        self.board = LoadBoard(stale_after_s)
        self.down = False

    def replica(self, name: str) -> SharedSlots:
        outer = self

        class Slots:
            async def acquire(self, tenant: str, limit: int, slot: str) -> bool:
                if outer.down:
                    raise TimeoutError("the load board did not answer")
                return await outer.board.acquire_slot(name, tenant, limit, slot)

            def release(self, slot: str) -> None:
                asyncio.get_running_loop().create_task(outer.board.release_slot(name, slot))

        return Slots()


def test_a_tenant_limit_holds_across_ingress_replicas_and_comes_back_as_slots_end() -> None:
    shared = _Board()
    first, second = Admission(shared.replica("a")), Admission(shared.replica("b"))

    async def run() -> None:
        held = [await first.slot(POLICY, "acme", replicas=2), await second.slot(POLICY, "acme", replicas=2)]
        for admission in (first, second):  # the limit is 2 for the service, not 2 per replica
            with pytest.raises(APIError) as full:
                await admission.slot(POLICY, "acme", replicas=2)
            assert full.value.status == 429
        held.pop().release()
        await asyncio.sleep(0)  # the give-back is sent without waiting
        held.append(await first.slot(POLICY, "acme", replicas=2))
        assert first.held_slots() | second.held_slots() == {slot.id for slot in held}

    asyncio.run(run())


def test_a_lost_give_back_is_corrected_by_the_next_sync_and_a_dead_replicas_slots_expire() -> None:
    shared = _Board(stale_after_s=0.05)
    first = Admission(shared.replica("a"))

    async def run() -> None:
        kept = await first.slot(POLICY, "acme")
        await shared.board.acquire_slot("a", "acme", 2, "lost")  # granted, but its answer never reached replica a
        with pytest.raises(APIError):
            await first.slot(POLICY, "acme")
        await shared.board.sync_slots("a", first.held_slots())
        second = await first.slot(POLICY, "acme")
        await shared.board.acquire_slot("dead", "acme", 9, "d1")  # an Ingress replica that then died
        assert not await shared.board.acquire_slot("c", "acme", 3, "c1")
        await asyncio.sleep(0.1)
        await shared.board.sync_slots("a", first.held_slots())
        assert first.held_slots() == {kept.id, second.id}
        assert await shared.board.acquire_slot("c", "acme", 3, "c1")  # a's two live slots count; the dead one's not

    asyncio.run(run())


def test_without_the_board_each_replica_holds_the_tenant_to_its_share_of_the_limit() -> None:
    shared = _Board()
    failures: list[Exception] = []
    admission = Admission(shared.replica("a"), failures.append)
    shared.down = True

    async def run() -> None:
        await admission.slot(POLICY, "acme", replicas=2)  # limit 2 over 2 replicas: one each
        with pytest.raises(APIError):
            await admission.slot(POLICY, "acme", replicas=2)

    asyncio.run(run())
    assert len(failures) == 2 and isinstance(failures[0], TimeoutError)


def test_a_coalesced_chunk_is_one_event_and_usage_follows_the_last() -> None:
    framer = SSEFramer(chat=True, request_id="chatcmpl-1", model="m", include_usage=True)
    events = framer.events(TierChunk(reasoning="so ", content="42", finish_reason="stop", reasoning_tokens=2, answer_tokens=1))
    bodies = [json.loads(line.removeprefix("data: ")) for line in events.split("\n\n") if line]
    assert len(bodies) == 2
    assert bodies[0]["choices"][0]["delta"] == {"reasoning": "so ", "reasoning_content": "so ", "content": "42"}
    assert bodies[0]["choices"][0]["finish_reason"] == "stop"
    assert bodies[1]["choices"] == [] and bodies[1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2}
    assert json.loads(framer.start().removeprefix("data: "))["choices"][0]["delta"]["role"] == "assistant"
