"""The HTTP endpoint and its clients: the server's settings and the tenants known by their API keys."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from thinktier.policies.schema.base import DEPLOY_TIME, Effort, StrictModel
from thinktier.policies.schema.pool import Replicas

ANONYMOUS = "anonymous"
"""The tenant of requests without an API key."""

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""An environment variable's name (where a secret comes from: the policy never holds one)."""


class Tenant(StrictModel):
    """A client of the service, known by its API key; the tenant named `anonymous` (no key) sets the limits of
    requests without a key."""

    api_key_env: str | None = Field(
        None,
        pattern=ENV_NAME,
        description="Environment variable holding the tenant's API key (never the key itself); required for every "
        "tenant but 'anonymous', which has none.",
    )
    max_concurrent_requests: int = Field(
        64, ge=1, description="Requests in flight at once across the whole service, whatever the number of Ingress "
        "replicas (the load board counts them; while it cannot be reached, each replica allows its share of the limit, "
        "rounded up); beyond, 429 with Retry-After."
    )
    max_effort: Effort = Field("high", description="Highest effort the tenant may ask for.")


class Server(StrictModel):
    """The HTTP endpoint: Serve's proxy, the Ingress replicas behind it, and how streams reach them."""

    host: str = Field("127.0.0.1", description="HTTP bind address.", json_schema_extra=DEPLOY_TIME)
    port: int = Field(8000, ge=1, le=65535, description="HTTP port.", json_schema_extra=DEPLOY_TIME)
    max_body_bytes: int = Field(1_000_000, ge=1024, description="Largest request body accepted.")
    allow_anonymous: bool | None = Field(
        None,
        description="Serve requests without an API key as tenant 'anonymous' (held to tenants.anonymous when the "
        "policy has that entry). Unset: only while no tenant has an API key; once one does, anonymous access needs "
        "an explicit true.",
    )
    metrics_api_key_env: str | None = Field(
        None,
        pattern=ENV_NAME,
        description="Environment variable holding the key that GET /metrics requires (Authorization: Bearer <key>); "
        "unset: /metrics is open. Health endpoints stay open either way.",
    )
    body_read_timeout_s: float = Field(
        30, gt=0, description="Longest time a client may take to send its request body; past it, 408 (a body "
        "trickled byte by byte does not hold the Ingress)."
    )
    tier_timeout_s: float = Field(
        600,
        gt=0,
        description="Longest a request may spend on its tier, streamed or not; past it the client gets a 504 (or an "
        "SSE error event) and the engine request is aborted. Serve's own request_timeout_s is set a little above it "
        "as a backstop.",
        json_schema_extra=DEPLOY_TIME,
    )
    tier_idle_timeout_s: float = Field(
        60, gt=0, description="Longest wait for a tier's first chunk and between two chunks of a stream; a stuck "
        "engine ends the request with a 504 (or an SSE error event) instead of holding its slot."
    )
    cold_start_timeout_s: float = Field(
        300, gt=0, description="Longest wait for the first chunk of a tier that may scale to zero (replicas.min: 0) "
        "while it has no live replica: the request waits for Serve to start one (x-thinktier-cold-start-s gives the "
        "wait) instead of failing over to the chat tier, which would leave the tier with no request to wake it. Set it "
        "above the tier's start-up time (engine load and warm-up)."
    )
    drain_timeout_s: float = Field(
        30,
        ge=0,
        description="When the service stops (`thinktier up` gets SIGTERM or Ctrl-C, the application is deleted, Serve "
        "scales a replica down or replaces it), requests in flight get this long to finish; a stream still running then ends "
        "with an SSE error event and [DONE]. Ray Serve's graceful_shutdown_timeout_s of the tier replicas; the Ingress "
        "gets a few seconds more so that it can send that event.",
        json_schema_extra=DEPLOY_TIME,
    )
    load_board_timeout_s: float = Field(
        2, gt=0, description="Deadline of the Ingress's calls to the load board (routing view, /readyz, /metrics)."
    )
    log_encoding: Literal["json", "text"] = Field(
        "json",
        description="Ray Serve's log encoding for every deployment: 'json' writes one object per line with the request "
        "id (the x-request-id every response carries), deployment and replica; prompts are never logged.",
        json_schema_extra=DEPLOY_TIME,
    )
    ingress_replicas: Replicas = Field(
        default_factory=Replicas,
        description="Ingress replicas (HTTP parsing, routing, SSE framing); between min and max they follow the "
        "requests in flight (ingress_target_ongoing_requests each).",
        json_schema_extra=DEPLOY_TIME,
    )
    ingress_target_ongoing_requests: float = Field(
        128,
        gt=0,
        description="Requests in flight per Ingress replica that the front door scales towards.",
        json_schema_extra=DEPLOY_TIME,
    )
    http_proxy: Literal["serve", "haproxy"] = Field(
        "serve",
        description="What carries HTTP to the Ingress replicas: Ray Serve's proxy actor (one Python process per node), "
        "or 'haproxy': Ray Serve's HAProxy mode, where HAProxy balances over Ingress replicas that serve HTTP "
        "themselves (direct ingress), so the front door grows with ingress_replicas. HAProxy runs with 128 KiB buffers "
        "(Ray's default is 16 KiB) so request headers up to about 120 KB pass, as through Serve's proxy; each request "
        "in flight holds two of them.",
        json_schema_extra=DEPLOY_TIME,
    )
    stream_interval_ms: float = Field(
        50, ge=0, le=1000,
        description="A stream's tokens leave the tier replica in batches at most this far apart, so the Ingress and "
        "proxy handle one message per batch, not per token; the first token and the first answer token go at once. "
        "0 sends every engine step on its own.",
        json_schema_extra=DEPLOY_TIME,
    )
