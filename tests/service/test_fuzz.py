"""A property-based fuzzer against the running service: thousands of generated bodies (near-valid OpenAI requests with
hostile values, arbitrary JSON, raw bytes) and Authorization headers, sent concurrently to both completion routes.

Every answer must be a 2xx or an OpenAI-shaped 4xx (never a 5xx, never a plain-text error), no wrong key is ever
served, and afterwards the service answers a normal request and every tenant's in-flight count is back to zero."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.conftest import TENANT_KEY, TENANT_KEY_ENV
from tests.hardening_results import Recorder
from tests.live import eventually, in_flight, policy_edit

pytestmark = pytest.mark.integration
EXAMPLES = 2200
CONCURRENCY = 48
NASTY_TEXT = ["", " ", "\ud800", "\udfff x", "\x00", "a" * 5000, "<think>", "</think>", "\u202e\u0301", "{{", "%s%n", "😀" * 50]
VALID_NAMES = ["thinktier", "auto", "tiny-chat", "tiny-reasoning"]
NAMES = [*VALID_NAMES, "reasoning", "chat", "gpt-4o", ""]
LEGAL_ODD_TEXT = ["<think>", "</think>", "\u202e\u0301", "{{", "%s%n", "😀" * 20, "\x00 hi", "line\r\nbreak", "\ufeff"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
text = st.text(max_size=40) | st.sampled_from(NASTY_TEXT)
small_tokens = st.integers(1, 4)
junk = json_values | st.integers(-(2**70), 2**70) | st.sampled_from(NASTY_TEXT)


def maybe(values: st.SearchStrategy[Any], junk_weight: int = 1) -> st.SearchStrategy[Any]:
    """Mostly a valid value, sometimes junk; None leaves the field out."""
    return st.one_of(*[values] * 6, st.none(), *[junk] * junk_weight)


messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant"]) | text, "content": text | json_values},
        optional={"name": text, "extra": json_values},
    )
    | json_values,
    max_size=4,
)
common = {
    "model": st.sampled_from(NAMES) | text | json_values,
    "stream": maybe(st.booleans()),
    "max_tokens": st.one_of(small_tokens, small_tokens, small_tokens, junk),  # valid requests stay tiny
    "max_thinking_tokens": st.one_of(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4), junk),
    "temperature": maybe(st.floats(0, 2)),
    "top_p": maybe(st.floats(0.01, 1)),
    "seed": maybe(st.integers(-(2**63), 2**63 - 1), 2),
    "stop": maybe(text | st.lists(text, max_size=6)),
    "reasoning_effort": maybe(st.sampled_from(["low", "medium", "high"])),
    "n": maybe(st.just(1)),
    "stream_options": maybe(st.fixed_dictionaries({"include_usage": st.booleans()})),
    "user": maybe(text),
}


def request_dict(prompt_field: str, prompt: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    fields = st.fixed_dictionaries({**common, prompt_field: prompt}, optional={"extra_field": json_values})
    return fields.map(lambda body: {k: v for k, v in body.items() if v is not None})


chat_body = request_dict("messages", messages)
completion_body = request_dict("prompt", text | st.lists(text, max_size=3) | json_values)
authorization = st.sampled_from(["", f"Bearer {TENANT_KEY}", f"bearer {TENANT_KEY}", "Bearer sk-wrong", "Bearer",
                                 "Basic dXNlcjpwYXNz", f"Token {TENANT_KEY}", f"Bearer {TENANT_KEY}x"])


def encode(body: Any) -> bytes:
    return json.dumps(body).encode()  # ensure_ascii: lone surrogates go as \\ud800 escapes, as a hostile client sends


# Valid requests with odd but legal values: each must be served (or throttled at the tenant's limit), never refused.
prompt = st.text(min_size=1, max_size=40).filter(str.strip) | st.sampled_from(LEGAL_ODD_TEXT)
valid_options = {
    "stream": st.booleans(),
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0.01, 1),
    "seed": st.integers(-(2**63), 2**63 - 1),
    "stop": prompt | st.lists(prompt, max_size=4),
    "reasoning_effort": st.sampled_from(["low", "medium", "high"]),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "user": st.text(max_size=20),
    "n": st.just(1),
    "unknown_field": json_values,
}
valid_required = {"model": st.sampled_from(VALID_NAMES), "max_tokens": small_tokens, "max_thinking_tokens": st.integers(0, 4)}
turn = st.fixed_dictionaries({"role": st.sampled_from(["system", "developer", "assistant"]), "content": prompt})
conversation = st.lists(turn, max_size=2).flatmap(
    lambda before: st.fixed_dictionaries({"role": st.just("user"), "content": prompt}).map(lambda last: [*before, last])
)
valid_chat = st.fixed_dictionaries({**valid_required, "messages": conversation}, optional=valid_options)
valid_completion = st.fixed_dictionaries(
    {**valid_required, "prompt": prompt | st.lists(prompt, min_size=1, max_size=1)}, optional=valid_options
)
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
VALID_CHAT = "valid chat requests with odd but legal values"
VALID_COMPLETION = "valid completion requests with odd but legal values"
NEAR_CHAT = "near-valid chat requests with hostile values"
NEAR_COMPLETION = "near-valid completion requests with hostile values"
JUNK = "arbitrary JSON and raw bytes"
case = st.one_of(
    st.tuples(st.just(CHAT), valid_chat.map(encode), authorization, st.just(VALID_CHAT)),
    st.tuples(st.just(COMPLETIONS), valid_completion.map(encode), authorization, st.just(VALID_COMPLETION)),
    st.tuples(st.just(CHAT), chat_body.map(encode), authorization, st.just(NEAR_CHAT)),
    st.tuples(st.just(CHAT), chat_body.map(encode), authorization, st.just(NEAR_CHAT)),
    st.tuples(st.just(COMPLETIONS), completion_body.map(encode), authorization, st.just(NEAR_COMPLETION)),
    st.tuples(st.sampled_from([CHAT, COMPLETIONS]), json_values.map(encode) | st.binary(max_size=64), authorization,
              st.just(JUNK)),
)
Case = tuple[str, bytes, str, str]
"""Route, body, Authorization header, and the kind of body (one of the names above)."""
SERVED_AUTH = ("", "Bearer", f"Bearer {TENANT_KEY}", f"bearer {TENANT_KEY}")  # "Bearer" alone: no key, anonymous


def check(route: str, body: bytes, auth: str, kind: str, response: httpx.Response) -> None:
    assert response.status_code in (200, 400, 401, 404, 413, 429)
    if auth not in SERVED_AUTH:
        assert response.status_code == 401  # a wrong key or scheme is never served
    elif kind in (VALID_CHAT, VALID_COMPLETION):
        assert response.status_code in (200, 429)  # served, or throttled at the tenant's limit
    if response.status_code != 200:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]
    elif response.headers["content-type"].startswith("text/event-stream"):
        assert response.text.rstrip().endswith("data: [DONE]") and '"error"' not in response.text
    else:
        assert response.json()["choices"]


def explicit(response: httpx.Response) -> bool:
    """Whether the answer is a complete one (a JSON completion, or a stream to its [DONE]) or an explicit error (an
    OpenAI error body, an SSE error event): what the hardening results count as not lost."""
    try:
        if response.status_code != 200:
            return bool(response.json()["error"]["message"])
        if response.headers["content-type"].startswith("text/event-stream"):
            return response.text.rstrip().endswith("data: [DONE]")
        return bool(response.json()["choices"])
    except (ValueError, KeyError, TypeError):
        return False


async def post_all(url: str, cases: list[Case]) -> tuple[list[str], list[tuple[Case, httpx.Response]]]:
    """Every case sent, CONCURRENCY at a time; what went wrong, one line per case, and every answer."""
    limit = asyncio.Semaphore(CONCURRENCY)
    failures: list[str] = []
    answers: list[tuple[Case, httpx.Response]] = []
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=CONCURRENCY)) as client:

        async def post(route: str, body: bytes, auth: str, kind: str) -> None:
            headers = {"Content-Type": "application/json"} | ({"Authorization": auth} if auth else {})
            async with limit:
                response = await client.post(route, content=body, headers=headers)
            answers.append(((route, body, auth, kind), response))
            try:
                check(route, body, auth, kind, response)
            except (AssertionError, ValueError, KeyError) as failed:  # ValueError: a body that is not JSON
                failures.append(f"{type(failed).__name__}: {failed or ''} {route} {auth!r} {body[:200]!r} -> "
                                f"{response.status_code} {response.text[:200]!r}")

        await asyncio.gather(*(post(*c) for c in cases))
    return failures, answers


def record_answers(record: Recorder, answers: list[tuple[Case, httpx.Response]], idle_s: float) -> None:
    """The hardening results' rows: each kind of body, the wrong Authorization headers, and the flood as a whole."""
    def row(what: str, some: list[httpx.Response], **kwargs: Any) -> None:
        record("input", what, len(some), Counter(str(r.status_code) for r in some),
               sum(not explicit(r) for r in some), **kwargs)

    for kind in (VALID_CHAT, VALID_COMPLETION, NEAR_CHAT, NEAR_COMPLETION, JUNK):
        row(f"generated bodies (hypothesis): {kind}", [r for (_, _, _, k), r in answers if k == kind])
    row("auth bypass attempts (generated): a wrong key, the key plus one character, Basic, Token with the right key",
        [r for (_, _, auth, _), r in answers if auth not in SERVED_AUTH])
    row(f"concurrency flood: all {len(answers)} generated requests, {CONCURRENCY} at a time, against tenant limits 4 "
        "(acme) and 16 (anonymous)", [r for _, r in answers], recover_s=idle_s,
        recovered_when="every tenant's in-flight count back to 0 after the last answer")


def test_generated_bodies_get_answers_or_openai_errors_and_leave_no_slot_behind(
    serving_url: str, served_policy_file: Path, record: Recorder
) -> None:
    cases: list[Case] = []

    @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case)
    def generate(one: Case) -> None:
        cases.append(one)

    tenants = {
        "server": {"allow_anonymous": True},
        "tenants": {"acme": {"api_key_env": TENANT_KEY_ENV, "max_concurrent_requests": 4},
                    "anonymous": {"max_concurrent_requests": 16}},
    }
    keyed = {"Authorization": f"Bearer {TENANT_KEY}"}
    with policy_edit(served_policy_file, tenants, lambda: in_flight(serving_url).keys() == {"acme", "anonymous"}):
        generate()  # first every body, then all of them at once: the service sees them concurrently
        assert len(cases) >= 2000
        failures, answers = asyncio.run(post_all(serving_url, cases))
        answered = time.monotonic()
        assert not failures, f"{len(failures)} of {len(cases)} answers were wrong:\n" + "\n".join(failures[:10])
        eventually(lambda: in_flight(serving_url) == {"acme": 0, "anonymous": 0}, "a tenant slot was never given back", 10)
        record_answers(record, answers, time.monotonic() - answered)
        counted = [ln for ln in httpx.get(f"{serving_url}/metrics").text.splitlines() if ln.startswith("thinktier_tenant_")]
        assert any(ln.startswith('thinktier_tenant_requests_total{outcome="admitted",tenant="acme"}') for ln in counted), counted
        response = httpx.post(f"{serving_url}/v1/chat/completions", headers=keyed, timeout=120, json={
            "model": "tiny-chat", "messages": [{"role": "user", "content": "what is 2 + 2"}], "max_tokens": 4})
        assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"]
