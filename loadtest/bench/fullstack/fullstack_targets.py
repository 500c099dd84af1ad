"""What `thinktier bench fullstack` starts for one config and how it talks to it: thinktier on a policy
(`thinktier up`), or the peer, Ray Serve LLM on the policy's reasoning tier (`thinktier loadtest peer`), with the
tier's engine settings and replica count and one budget per request (the policy's default effort)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from thinktier.loadtest.bench.fullstack.fullstack_record import IDLE_ANSWER_TOKENS
from thinktier.loadtest.client import RequestOptions
from thinktier.loadtest.ray_llm_target import PEER_MODEL_ID, PEER_READY_LINE, peer_options
from thinktier.policies.schema import Policy

Kind = Literal["thinktier", "ray-serve-llm"]
AUTO_MODEL = "thinktier"
"""The model name thinktier routes by difficulty (thinktier.deployments.request.ingress.AUTO_MODELS)."""
PEER_METRICS_PORT = 8090
"""Ray's metrics export port, where the peer's vLLM series are."""


@dataclass(frozen=True)
class Series:
    """The engine series a config exports, by the names the driver records them under, and the labels kept."""

    names: dict[str, str]
    """Exported name -> recorded name."""
    labels: dict[str, str] | None
    """Exported label -> recorded label ('tier', 'replica'); None keeps every label."""


THINKTIER_ENGINE = Series(
    {f"thinktier_{n}": n for n in ("kv_cache_occupancy_ratio", "requests_running", "requests_waiting")}, None
)
THINKTIER_FINAL = Series(
    {**THINKTIER_ENGINE.names, "thinktier_preemptions_total": "preemptions_total",
     "thinktier_degraded_requests_total": "degraded_requests_total"},
    None,
)
PEER_LABELS = {"model_name": "tier", "replica": "replica", "WorkerId": "worker"}
"""Ray labels its series with much more (node, session, component); these tell tiers and engines apart."""
PEER_ENGINE = Series(
    {"ray_vllm_kv_cache_usage_perc": "kv_cache_occupancy_ratio", "ray_vllm_num_requests_running": "requests_running",
     "ray_vllm_num_requests_waiting": "requests_waiting"},
    PEER_LABELS,
)
PEER_FINAL = Series({**PEER_ENGINE.names, "ray_vllm_num_preemptions_total": "preemptions_total"}, PEER_LABELS)


@dataclass(frozen=True)
class Config:
    """One config of a fullstack run: a name for its files, a policy, and what serves it."""

    name: str
    policy: Path
    kind: Kind = "thinktier"

    @property
    def is_peer(self) -> bool:
        return self.kind == "ray-serve-llm"

    def start_command(self, port: int, ready_timeout_s: float) -> list[str]:
        if self.is_peer:
            return [sys.executable, "-u", "-m", "thinktier", "loadtest", "peer", "--policy", str(self.policy), "--port",
                    str(port), "--metrics-port", str(PEER_METRICS_PORT), "--ready-timeout", str(ready_timeout_s)]
        return [sys.executable, "-u", "-m", "thinktier", "up", "--policy", str(self.policy), "--port", str(port),
                "--timeout", str(ready_timeout_s)]

    def ready_path(self) -> str:
        """GET path that answers 200 once the config serves."""
        return "/v1/models" if self.is_peer else "/readyz"

    def ready_mark(self) -> str | None:
        """A line the server prints once every replica runs, needed besides `ready_path`: Ray Serve LLM's ingress
        lists the model a minute before its engines have started."""
        return PEER_READY_LINE if self.is_peer else None

    def metrics_url(self, url: str) -> str:
        return f"http://127.0.0.1:{PEER_METRICS_PORT}/metrics" if self.is_peer else f"{url}/metrics"

    @property
    def engine_series(self) -> Series:
        return PEER_ENGINE if self.is_peer else THINKTIER_ENGINE

    @property
    def final_series(self) -> Series:
        return PEER_FINAL if self.is_peer else THINKTIER_FINAL

    def peer_options(self, policy: Policy) -> RequestOptions:
        return peer_options(policy, policy.routing.reasoning_tier, PEER_MODEL_ID)

    def loadtest_args(self, policy: Policy, url: str) -> list[str]:
        """What `thinktier loadtest run` needs besides the workload: thinktier routes requests by difficulty
        itself; the peer gets its model, the one budget and its metrics page."""
        if not self.is_peer:
            return []
        options = self.peer_options(policy)
        args = ["--model", str(options.model), "--max-tokens", str(options.max_tokens),
                "--metrics-url", self.metrics_url(url), "--exporter", "ray-serve-llm"]
        if options.thinking_token_budget is not None:
            args += ["--thinking-token-budget", str(options.thinking_token_budget)]
        return args

    def warm_up_bodies(self, policy: Policy) -> list[tuple[RequestOptions, str]]:
        """Eight tiny requests (two more to the chat tier when there is one), so that no replica's first-request cost
        lands in the measurement."""
        if self.is_peer:
            tiny = RequestOptions(model=PEER_MODEL_ID, max_tokens=8, thinking_token_budget=4)
        else:
            tiny = RequestOptions(model=AUTO_MODEL, max_tokens=8, reasoning_effort="low", max_thinking_tokens=16)
        bodies = [(tiny, f"Warm-up {i}: what is {i} + {i}?") for i in range(8)]
        if not self.is_peer and (chat := chat_model(policy)) is not None:
            bodies += [(RequestOptions(model=chat, max_tokens=8), "Hi")] * 2
        return bodies

    def idle_options(self, policy: Policy) -> RequestOptions:
        """A 256-token answer with no thinking: from the chat tier when the policy has one, else the auto model at
        low effort with a thinking budget of 0 (the peer: vLLM's thinking budget of 0)."""
        if self.is_peer:
            return RequestOptions(model=PEER_MODEL_ID, max_tokens=IDLE_ANSWER_TOKENS, thinking_token_budget=0)
        if (chat := chat_model(policy)) is not None:
            return RequestOptions(model=chat, max_tokens=IDLE_ANSWER_TOKENS)
        return RequestOptions(model=AUTO_MODEL, max_tokens=IDLE_ANSWER_TOKENS, reasoning_effort="low", max_thinking_tokens=0)


def chat_model(policy: Policy) -> str | None:
    chat = policy.routing.chat_tier
    return policy.served_name(chat) if chat is not None else None
