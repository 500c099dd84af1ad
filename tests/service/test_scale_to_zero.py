"""A tier that may scale to zero wakes for the next request instead of failing it over: real Serve, real vLLM.

A second application joins the session's Ray cluster with its one tier at `replicas.min: 0`, so it starts with no
replica at all: the state a tier is in once it has scaled to zero.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import yaml

from tests.conftest import TINY_POLICY
from tests.live import eventually, merged

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cold_app(serving_cluster: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from thinktier.cluster.local import LocalCluster

    policy = yaml.safe_load(TINY_POLICY.read_text())
    del policy["tiers"]["chat"]
    policy = merged(policy, {
        "tiers": {"reasoning": {"replicas": {"min": 0, "max": 1}}},
        "routing": {"chat_tier": None, "classifier": {"enabled": False}},
        "server": {"cold_start_timeout_s": 300},
    })
    path = tmp_path_factory.mktemp("cold") / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    app = LocalCluster(path, port=serving_cluster.port, app_name="cold", route_prefix="/cold",  # type: ignore[attr-defined]
                       progress=lambda line: print(f"[cold] {line}"))
    app.start(timeout_s=600)
    yield app.url
    app.stop()


def test_a_tier_at_zero_is_ready_and_serves_the_next_request_once_a_replica_has_started(cold_app: str) -> None:
    ready = httpx.get(f"{cold_app}/readyz", timeout=30)
    assert ready.status_code == 200 and ready.json()["replicas"] == {"reasoning": 0}
    body = {"model": "thinktier", "messages": [{"role": "user", "content": "what is 2 + 2"}], "max_tokens": 4,
            "max_thinking_tokens": 4, "stream": True}
    with httpx.stream("POST", f"{cold_app}/v1/chat/completions", json=body, timeout=360) as response:
        text = response.read().decode()
    assert response.status_code == 200, text
    assert response.headers["x-thinktier-tier"] == "reasoning" and "x-thinktier-degraded" not in response.headers
    assert float(response.headers["x-thinktier-cold-start-s"]) > 0
    assert text.rstrip().endswith("data: [DONE]")
    eventually(lambda: httpx.get(f"{cold_app}/readyz", timeout=30).json()["replicas"] == {"reasoning": 1},
               "the started replica never reported")
