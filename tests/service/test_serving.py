"""The serving path over real HTTP: real Ray Serve, real vLLM engines on the tiny model (policies/examples/tiny.yaml)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import TENANT_KEY, TENANT_KEY_ENV, TINY_POLICY
from tests.hardening_results import Recorder
from tests.live import scraped
from thinktier.policies.loader import load_policy

pytestmark = pytest.mark.integration
POLICY = load_policy(TINY_POLICY)
HIGH = POLICY.tiers["reasoning"].budgets["high"]
QUESTION = [{"role": "user", "content": "what is the sum of 17 and 25"}]


def chat(url: str, **body: object) -> httpx.Response:
    payload = {"model": "thinktier", "messages": QUESTION, "seed": 7, **body}
    return httpx.post(f"{url}/v1/chat/completions", json=payload, timeout=120)


def test_thinking_cap_gives_bounded_reasoning_then_an_answer(serving_url: str) -> None:
    response = chat(serving_url, max_thinking_tokens=6, reasoning_effort="high")
    assert response.status_code == 200, response.text
    body = response.json()
    message = body["choices"][0]["message"]
    usage = body["usage"]
    assert 0 < usage["completion_tokens_details"]["reasoning_tokens"] <= 6
    assert message["reasoning"] and message["reasoning"] == message["reasoning_content"]
    assert message["content"], "the budget must close the thinking and leave room for an answer"
    assert usage["completion_tokens"] > usage["completion_tokens_details"]["reasoning_tokens"]
    assert response.headers["x-thinktier-thinking-budget"] == "6"
    assert response.headers["x-thinktier-tier"] == "reasoning"


def test_effort_sets_the_policy_budget_and_request_caps_only_lower_it(serving_url: str) -> None:
    response = chat(serving_url, reasoning_effort="high", max_thinking_tokens=10_000, max_tokens=10_000)
    assert response.status_code == 200, response.text
    assert response.headers["x-thinktier-thinking-budget"] == str(HIGH.thinking_tokens)
    assert response.headers["x-thinktier-answer-budget"] == str(HIGH.answer_tokens)
    usage = response.json()["usage"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] <= HIGH.thinking_tokens
    assert usage["completion_tokens"] - usage["completion_tokens_details"]["reasoning_tokens"] <= HIGH.answer_tokens
    low = chat(serving_url, reasoning_effort="low")
    assert low.headers["x-thinktier-thinking-budget"] == str(POLICY.tiers["reasoning"].budgets["low"].thinking_tokens)


def test_openai_client_streams_reasoning_before_content(serving_url: str) -> None:
    client = openai.OpenAI(base_url=f"{serving_url}/v1", api_key="unused")
    stream = client.chat.completions.create(
        model="tiny-reasoning", messages=QUESTION, stream=True, stream_options={"include_usage": True},
        seed=3, extra_body={"max_thinking_tokens": 5},
    )
    kinds: list[str] = []
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            extra = choice.delta.model_extra or {}
            if extra.get("reasoning"):
                kinds.append("reasoning")
            if choice.delta.content:
                kinds.append("content")
    assert "reasoning" in kinds and "content" in kinds
    assert kinds.index("content") > max(i for i, k in enumerate(kinds) if k == "reasoning"), kinds
    assert usage is not None and 0 < usage.completion_tokens_details.reasoning_tokens <= 5


def test_chat_tier_answers_without_thinking(serving_url: str) -> None:
    response = chat(serving_url, model="tiny-chat")
    assert response.status_code == 200, response.text
    body = response.json()
    assert response.headers["x-thinktier-tier"] == "chat"
    assert body["model"] == "tiny-chat"
    assert "reasoning" not in body["choices"][0]["message"]
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
    assert body["choices"][0]["message"]["content"]


def test_completions_route_streams_and_not(serving_url: str) -> None:
    plain = httpx.post(
        f"{serving_url}/v1/completions",
        json={"model": "tiny-reasoning", "prompt": "two plus two is", "max_tokens": 8, "max_thinking_tokens": 4, "seed": 1},
        timeout=120,
    )
    assert plain.status_code == 200, plain.text
    choice = plain.json()["choices"][0]
    assert plain.json()["object"] == "text_completion"
    assert choice["text"] and plain.json()["usage"]["completion_tokens_details"]["reasoning_tokens"] <= 4
    client = openai.OpenAI(base_url=f"{serving_url}/v1", api_key="unused")
    texts = [c.choices[0].text for c in client.completions.create(model="tiny-chat", prompt="hello", max_tokens=6,
                                                                   stream=True, seed=2) if c.choices]
    assert "".join(texts)


def test_models_health_and_readiness(serving_url: str) -> None:
    models = {m["id"] for m in httpx.get(f"{serving_url}/v1/models").json()["data"]}
    assert {"thinktier", "tiny-reasoning", "tiny-chat"} <= models
    assert httpx.get(f"{serving_url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{serving_url}/readyz")
    assert ready.status_code == 200 and ready.json()["replicas"] == {"reasoning": 1, "chat": 1}


def test_metrics_count_the_request(serving_url: str) -> None:
    def served() -> float:
        text = httpx.get(f"{serving_url}/metrics").text
        line = next((ln for ln in text.splitlines() if ln.startswith('thinktier_requests_total{outcome="ok",tier="chat"}')), None)
        return float(line.split()[-1]) if line else 0.0

    def ttfvt_counts() -> dict[str, float]:
        """TTFVT observations on the chat tier by difficulty class."""
        name = "thinktier_time_to_first_visible_token_seconds_count"
        return {c: scraped(serving_url, name, tier="chat", difficulty=c) for c in ("easy", "medium", "hard")}

    before, ttfvt_before = served(), ttfvt_counts()
    response = chat(serving_url, model="tiny-chat")
    assert response.status_code == 200
    assert served() == before + 1
    difficulty = response.headers["x-thinktier-difficulty"]  # the router's class: the one its latencies are kept under
    assert ttfvt_counts() == ttfvt_before | {difficulty: ttfvt_before[difficulty] + 1}
    text = httpx.get(f"{serving_url}/metrics").text
    for name in ("thinktier_time_to_first_visible_token_seconds_bucket", "thinktier_request_thinking_tokens_bucket",
                 "thinktier_kv_cache_occupancy_ratio", "thinktier_requests_running", "thinktier_stragglers"):
        assert name in text, name


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        (b'["a list"]', 400, None),
        (b'{"model": "thinktier"}', 400, "messages"),
        (b'{"model": "thinktier", "messages": [{"role": "user", "content": "hi"}], "temperature": 7}', 400, "temperature"),
        (b'{"model": "thinktier", "messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "max"}', 400,
         "reasoning_effort"),
        (b'{"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}', 404, "model"),
        # hostile inputs that once came back as plain-text 500s
        (b'{"model": "thinktier", "messages": ' + b"[" * 20_000 + b"]" * 20_000 + b"}", 400, None),
        (b'{"model": "thinktier", "messages": [{"role": "user", "content": "hi"}], "max_tokens": ' + b"9" * 5000 + b"}",
         400, None),
        (b'{"model": "thinktier", "messages": [{"role": "user", "content": "\\ud800 lone surrogate"}]}', 400,
         "messages.0.content"),
        (b'{"model": "thinktier", "messages": [{"role": "user", "content": "hi"}], "stop": [""]}', 400, "stop"),
        (b'{"model": "thinktier", "messages": [{"role": "user", "content": ""}]}', 400, None),
        (b'{"model": "thinktier", "messages": [{"role": "user", "content": "hi"}], "seed": 18446744073709551616}', 400,
         "seed"),
        (b'{"model": "thinktier", "messages": [{"role": "user", "content": "hi"}], "seed": -9223372036854775809}', 400,
         "seed"),
        (b'{"model": "thinktier", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4294967296}', 400,
         "max_tokens"),
    ],
)
def test_bad_requests_get_openai_errors_and_service_keeps_serving(
    serving_url: str, body: bytes, status: int, param: str | None, record: Recorder
) -> None:
    response = httpx.post(f"{serving_url}/v1/chat/completions", content=body,
                          headers={"Content-Type": "application/json"}, timeout=60)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"] and error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert chat(serving_url, model="tiny-chat").status_code == 200
    record("input", "fixed list of nasty bodies (deep JSON, huge integers, lone surrogates, empty prompts and stops, "
           "out-of-range seeds and token counts, ...), each followed by a normal request", 1, {str(status): 1})


def test_an_empty_completion_prompt_and_an_endless_body_get_openai_errors(serving_url: str) -> None:
    empty = httpx.post(f"{serving_url}/v1/completions", json={"model": "tiny-chat", "prompt": " "}, timeout=60)
    assert empty.status_code == 400 and "the prompt is empty" in empty.json()["error"]["message"]

    def endless() -> Iterator[bytes]:  # chunked: no Content-Length to refuse it by
        yield b'{"model": "tiny-chat", "messages": [{"role": "user", "content": "'
        for _ in range(400):
            yield b"x" * 4096

    too_big = httpx.post(f"{serving_url}/v1/chat/completions", content=endless(), timeout=60)
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "body_too_large"
    assert chat(serving_url, model="tiny-chat").status_code == 200


def test_oversized_prompt_is_rejected_with_its_length(serving_url: str) -> None:
    long_prompt = "apples cost three dollars " * 400
    response = chat(serving_url, messages=[{"role": "user", "content": long_prompt}])
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    limit = POLICY.tiers["reasoning"].max_prompt_tokens  # both tiers of the tiny policy accept the same
    assert limit == POLICY.tiers["chat"].max_prompt_tokens
    assert error["code"] == "context_length_exceeded" and f"at most {limit}" in error["message"]
    assert chat(serving_url, model="tiny-chat").status_code == 200


def test_live_reload_applies_good_edits_and_keeps_serving_through_bad_ones(serving_url: str, served_policy_file: Path) -> None:
    import time

    original = served_policy_file.read_text()

    def low_budget() -> str:
        response = chat(serving_url, reasoning_effort="low")
        assert response.status_code == 200, response.text
        return response.headers["x-thinktier-thinking-budget"]

    def eventually(expected: str) -> None:
        deadline = time.monotonic() + 15
        while low_budget() != expected:
            assert time.monotonic() < deadline, f"the low-effort budget never became {expected}"
            time.sleep(0.5)

    def metric(outcome: str) -> float:
        text = httpx.get(f"{serving_url}/metrics").text
        line = next(ln for ln in text.splitlines() if ln.startswith(f'thinktier_policy_reloads_total{{outcome="{outcome}"}}'))
        return float(line.split()[-1])

    try:
        assert low_budget() == "8"
        rejected = metric("rejected")
        served_policy_file.write_text(original.replace("low: {thinking_tokens: 8", "low: {thinking_tokens: [8"))
        for _ in range(6):  # requests keep succeeding with the last good policy while the file is broken
            assert low_budget() == "8"
            time.sleep(0.5)
        assert metric("rejected") == rejected + 1
        served_policy_file.write_text(original.replace("low: {thinking_tokens: 8", "low: {thinking_tokens: 3"))
        eventually("3")
        deadline = time.monotonic() + 10  # the ingress watches the file too, on its own clock
        while metric("applied") < 1:
            assert time.monotonic() < deadline, "the applied reload is not counted on /metrics"
            time.sleep(0.5)
    finally:
        served_policy_file.write_text(original)
    eventually("8")


def test_a_classifier_past_its_deadline_leaves_the_request_routed_without_a_score(
    serving_url: str, served_policy_file: Path
) -> None:
    import time

    def timeouts() -> float:
        text = httpx.get(f"{serving_url}/metrics").text
        return float(next(ln for ln in text.splitlines() if ln.startswith("thinktier_classifier_timeouts_total")).split()[-1])

    original = served_policy_file.read_text()
    before = timeouts()
    hasty = original.replace("placement: deployment}", "placement: deployment, timeout_s: 0.000001}")
    assert hasty != original
    served_policy_file.write_text(hasty)
    try:
        deadline = time.monotonic() + 15
        while (response := chat(serving_url, messages=[{"role": "user", "content": "Hey there!"}])).headers.get(
            "x-thinktier-reason"
        ) != "default":
            assert response.status_code == 200, response.text
            assert time.monotonic() < deadline, "the classifier's timeout never applied"
            time.sleep(0.5)
        assert response.status_code == 200 and "x-thinktier-difficulty-score" not in response.headers
        assert timeouts() > before
    finally:
        served_policy_file.write_text(original)
    deadline = time.monotonic() + 15
    hello = [{"role": "user", "content": "Hey there!"}]
    while chat(serving_url, messages=hello).headers.get("x-thinktier-reason") != "classifier":
        assert time.monotonic() < deadline, "the classifier never came back"
        time.sleep(0.5)


def test_every_response_names_its_request_id_and_a_client_may_set_it(serving_url: str) -> None:
    served, refused = chat(serving_url, model="tiny-chat"), chat(serving_url, model="no-such-model")
    ids = served.headers["x-request-id"], refused.headers["x-request-id"]
    assert served.json()["id"] == f"chatcmpl-{ids[0]}"
    assert refused.status_code == 404 and ids[1] and ids[0] != ids[1]
    mine = httpx.post(f"{serving_url}/v1/chat/completions", headers={"x-request-id": "trace-42"}, timeout=120,
                      json={"model": "tiny-chat", "messages": QUESTION, "max_tokens": 4})
    assert (mine.headers["x-request-id"], mine.json()["id"]) == ("trace-42", "chatcmpl-trace-42")


def test_classifier_decides_tier_and_effort_visible_in_headers(serving_url: str) -> None:
    from thinktier.deployments.classifier.difficulty import DifficultyModel
    from thinktier.training.data.problems import load_problems

    greeting = chat(serving_url, messages=[{"role": "user", "content": "Hey! Hope your week is going well."}])
    assert greeting.status_code == 200, greeting.text
    assert (greeting.headers["x-thinktier-tier"], greeting.headers["x-thinktier-reason"]) == ("chat", "classifier")
    assert float(greeting.headers["x-thinktier-difficulty-score"]) < POLICY.routing.thresholds.reasoning

    held_out = {pid for ids in DifficultyModel.load().manifest.provenance.held_out_problems.values() for pid in ids}
    olympiad = [p for p in load_problems(["en"]) if p.source in ("AIME2024", "AIME2025", "CNMO") and p.id in held_out
                and len(p.text) <= 500]  # the tiny policy's prompt limit
    decisions = []
    for problem in olympiad:
        response = chat(serving_url, messages=[{"role": "user", "content": problem.text}], max_thinking_tokens=4, max_tokens=4)
        assert response.status_code == 200, response.text
        decisions.append(response.headers)
    assert len(decisions) >= 5
    assert all((d["x-thinktier-tier"], d["x-thinktier-reason"]) == ("reasoning", "classifier") for d in decisions)
    harder = [d for d in decisions if d["x-thinktier-effort"] in ("medium", "high")]
    assert len(harder) >= 0.8 * len(decisions), [d["x-thinktier-difficulty-score"] for d in decisions]
    assert all(int(d["x-thinktier-priority"]) > int(greeting.headers["x-thinktier-priority"]) for d in harder)


def test_tenants_share_no_prefix_cache_hits_while_one_tenant_does(serving_url: str, served_policy_file: Path) -> None:
    import time

    long_prompt = "Summarise the history of the lighthouse keepers of the northern coast, one decade at a time. " * 5

    def hits() -> float:
        time.sleep(3)  # replicas report their engine counters every second; the ingress reads them per scrape
        lines = httpx.get(f"{serving_url}/metrics").text.splitlines()
        chat = [ln for ln in lines if ln.startswith("thinktier_prefix_cache_hits_total{") and 'tier="chat"' in ln]
        return sum(float(ln.split()[-1]) for ln in chat)

    def ask(key: str | None) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        body = {"model": "tiny-chat", "messages": [{"role": "user", "content": long_prompt}], "max_tokens": 1}
        response = httpx.post(f"{serving_url}/v1/chat/completions", json=body, headers=headers, timeout=120)
        assert response.status_code == 200, response.text

    original = served_policy_file.read_text()
    tenants = f"server: {{allow_anonymous: true}}\ntenants:\n  acme: {{api_key_env: {TENANT_KEY_ENV}}}\n"
    served_policy_file.write_text(original + tenants)
    try:
        deadline = time.monotonic() + 15
        while httpx.post(f"{serving_url}/v1/chat/completions", headers={"Authorization": "Bearer sk-nobody"},
                         json={"model": "tiny-chat", "messages": QUESTION}, timeout=60).status_code != 401:
            assert time.monotonic() < deadline, "the tenant never applied"
            time.sleep(0.5)
        ask(None)  # anonymous, first time: fills the cache
        start = hits()
        ask(None)
        again = hits()
        assert again > start  # the same tenant hits its own cached prompt
        ask(TENANT_KEY)  # acme sends the very same prompt
        assert hits() == again  # ... and finds nothing of anonymous's in the cache
        ask(TENANT_KEY)
        assert hits() > again  # but does hit its own
    finally:
        served_policy_file.write_text(original)


def test_tenants_are_known_by_api_key_and_held_to_their_effort(serving_url: str, served_policy_file: Path) -> None:
    import time

    original = served_policy_file.read_text()
    low = str(POLICY.tiers["reasoning"].budgets["low"].thinking_tokens)

    def ask(key: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        body = {"model": "tiny-reasoning", "reasoning_effort": "high", "messages": QUESTION, "max_tokens": 4}
        return httpx.post(f"{serving_url}/v1/chat/completions", json=body, headers=headers, timeout=120)

    served_policy_file.write_text(original + f"tenants:\n  acme: {{api_key_env: {TENANT_KEY_ENV}, max_effort: low}}\n")
    try:
        deadline = time.monotonic() + 15
        while ask(TENANT_KEY).headers.get("x-thinktier-thinking-budget") != low:
            assert time.monotonic() < deadline, "the tenant's max_effort never applied"
            time.sleep(0.5)
        lower_case = httpx.post(f"{serving_url}/v1/chat/completions", headers={"Authorization": f"bearer  {TENANT_KEY}"},
                                json={"model": "tiny-reasoning", "reasoning_effort": "high", "messages": QUESTION,
                                      "max_tokens": 4}, timeout=120)
        assert lower_case.headers.get("x-thinktier-thinking-budget") == low  # the scheme in any case, spaces trimmed
        basic = httpx.post(f"{serving_url}/v1/chat/completions", headers={"Authorization": "Basic dXNlcjpwYXNz"},
                           content=b"{not even json", timeout=60)
        assert basic.status_code == 401 and "unsupported authorization scheme" in basic.json()["error"]["message"]
        unknown = ask("sk-not-a-tenant")
        assert unknown.status_code == 401
        error = unknown.json()["error"]
        assert error["type"] == "authentication_error" and "unknown API key" in error["message"]
        anonymous = ask(None)  # a policy with tenants serves no request without a key unless it says so
        assert anonymous.status_code == 401 and "missing API key" in anonymous.json()["error"]["message"]
    finally:
        served_policy_file.write_text(original)
    deadline = time.monotonic() + 15
    while ask("sk-not-a-tenant").status_code != 200:  # without tenants, any key is served
        assert time.monotonic() < deadline, "removing the tenants never applied"
        time.sleep(0.5)


@pytest.mark.parametrize("hint", [{"reasoning_effort": "none"}, {"reasoning_effort": "minimal"}, {"thinking": False}])
def test_a_caller_can_turn_thinking_off_and_is_served_by_the_chat_tier(serving_url: str, hint: dict[str, object]) -> None:
    hard = [{"role": "user", "content": "Prove that there are infinitely many primes p with p = 3 mod 4."}]
    response = chat(serving_url, messages=hard, **hint)
    assert response.status_code == 200, response.text
    headers = response.headers
    assert (headers["x-thinktier-tier"], headers["x-thinktier-thinking-budget"], headers["x-thinktier-reason"]) == (
        "chat", "0", "request_no_thinking")
    assert response.json()["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
    refused = chat(serving_url, reasoning_effort="extreme")
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "reasoning_effort"


def test_classifier_latency_and_decisions_by_class_and_script_are_counted(serving_url: str) -> None:
    from tests.live import scraped

    scored = scraped(serving_url, "thinktier_classifier_latency_seconds_count")
    han = scraped(serving_url, "thinktier_classifier_decisions_total", script="han")
    response = chat(serving_url, messages=[{"role": "user", "content": "你好，今天天气怎么样？"}], max_tokens=4)  # noqa: RUF001
    assert response.status_code == 200, response.text
    klass = response.headers["x-thinktier-difficulty"]
    assert scraped(serving_url, "thinktier_classifier_decisions_total", script="han", difficulty=klass) >= 1
    assert scraped(serving_url, "thinktier_classifier_decisions_total", script="han") == han + 1
    assert scraped(serving_url, "thinktier_classifier_latency_seconds_count") == scored + 1
