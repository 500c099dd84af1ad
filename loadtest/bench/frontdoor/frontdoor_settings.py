"""The front-door bench's settings, apart from the bench itself: the CLI builds its parser from them, and the bench
imports Ray Serve, which the command line must not need to start (the GPU machine's benches run without Ray)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from thinktier.loadtest.bench.frontdoor.frontdoor_report import Variant
from thinktier.policies.loader import DEFAULT_POLICY

FRONTDOOR_POLICY = DEFAULT_POLICY.parent / "examples" / "frontdoor-bench.yaml"


@dataclass(frozen=True)
class BenchSettings:
    streams: int = 256
    tokens_per_stream_per_s: float = 80.0
    rates: tuple[float, ...] = ()
    """Offered loads, tokens/s in all; each is run at `rate / streams` per stream. Empty: `tokens_per_stream_per_s`."""
    thinking_tokens: int = 256
    answer_tokens: int = 256
    duration_s: float = 30.0
    intervals_ms: tuple[float, ...] = (0.0, 50.0)
    ingress_replicas: int = 2
    """More than 1 adds a variant with this many Ingress replicas at the largest of `intervals_ms`."""
    tier_replicas: int = 4
    """Synthetic reasoning-tier replicas: enough that making the tokens is not what limits the rate."""
    floor_workers: int = 1
    client_procs: int = 4
    port: int = 18780
    """thinktier's HTTP port; the floor listens on the next one."""
    policy: Path = FRONTDOOR_POLICY
    http_proxy: Literal["serve", "haproxy"] = "serve"
    """The policy's `server.http_proxy` for the whole run (it is set when Ray starts)."""
    out: Path = field(default_factory=lambda: Path("loadtest/results/frontdoor"))

    def variants(self) -> list[Variant]:
        per_stream = [rate / self.streams for rate in self.rates] or [self.tokens_per_stream_per_s]
        variants = []
        for rate in per_stream:
            variants += [Variant(interval_ms=i, ingress_replicas=1, tokens_per_stream_per_s=rate, streams=self.streams)
                         for i in self.intervals_ms]
            if self.ingress_replicas > 1:
                variants.append(Variant(interval_ms=max(self.intervals_ms), ingress_replicas=self.ingress_replicas,
                                        tokens_per_stream_per_s=rate, streams=self.streams))
        return variants

    def ramp_s(self, variant: Variant) -> float:
        """One request's length: the streams start spread over it, and the window opens after it."""
        return (self.thinking_tokens + self.answer_tokens) / variant.tokens_per_stream_per_s

    def as_dict(self) -> dict[str, Any]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}
