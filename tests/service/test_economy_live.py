"""Self-consistency through the running service: real Ray Serve, real vLLM engines on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.live import policy_edit, scraped

pytestmark = pytest.mark.integration
QUESTION = [{"role": "user", "content": "what is 6 times 7"}]
SAMPLES = 4


def chat(url: str, **body: object) -> httpx.Response:
    payload = {"model": "thinktier", "messages": QUESTION, "reasoning_effort": "high", "seed": 3, **body}
    response = httpx.post(f"{url}/v1/chat/completions", json=payload, timeout=120)
    assert response.status_code == 200, response.text
    return response


def test_samples_vote_and_the_response_shows_votes_usage_and_metrics(serving_url: str, served_policy_file: Path) -> None:
    edit = {"tiers": {"reasoning": {"budgets": {"high": {"samples": SAMPLES}}}}}
    with policy_edit(served_policy_file, edit, lambda: chat(serving_url).headers["x-thinktier-samples"] == str(SAMPLES)):
        started = scraped(serving_url, "thinktier_samples_started_total", tier="reasoning")
        single = chat(serving_url, samples=1)
        assert "votes" not in single.json() and "x-thinktier-votes" not in single.headers

        voted = chat(serving_url, early_stop=False)  # every sample to its end
        body = voted.json()
        assert sum(body["votes"].values()) <= SAMPLES and json.loads(voted.headers["x-thinktier-votes"]) == body["votes"]
        assert voted.headers["x-thinktier-samples-aborted"] == "0"
        assert body["choices"][0]["message"]["content"]
        assert body["usage"]["completion_tokens"] > 2 * single.json()["usage"]["completion_tokens"]

        with httpx.stream("POST", f"{serving_url}/v1/chat/completions", timeout=120, json={
            "model": "thinktier", "messages": QUESTION, "reasoning_effort": "high", "seed": 3, "stream": True,
        }) as stream:
            events = [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: {")]
        deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
        first_content = next(i for i, d in enumerate(deltas) if d.get("content"))
        assert any(d.get("reasoning") for d in deltas[:first_content])  # one sample's reasoning streams as progress
        assert "votes" in events[-1] and sum(events[-1]["votes"].values()) <= SAMPLES

        # /metrics counts the samples started once replicas have pushed their snapshot: all 4 of the vote without an
        # early stop, and 3 (or 4 where the first 3 disagreed) of the streamed one, whose samples are staged
        counted = scraped(serving_url, "thinktier_samples_started_total", tier="reasoning") - started - SAMPLES
        assert counted in (3, 4)
