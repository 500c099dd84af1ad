"""Results of the front-door benchmark: the arithmetic (tokens/s, CPU, per-token latency) and the JSON,
Markdown and PNG it writes.

CPU % is of one core (100 = one core busy for the whole window). Cores per 1,000 tokens/s is the CPU a
path burns per 1,000 streamed tokens a second: cores used / (achieved tokens/s / 1000). Inter-token latency
spreads each event's gap over the tokens it carries: an event of k tokens that came g after the previous
one gives k samples of g / k, so the percentiles are over tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from thinktier.loadtest.bench.frontdoor.frontdoor_client import ClientSample
from thinktier.loadtest.report import Percentiles

THINKTIER_GROUPS = ("ingress", "proxy", "tier", "ray_other")
"""Server processes of thinktier: the Ingress replicas, Serve's HTTP proxy, the synthetic tier replicas, and
the rest of Ray (raylet, GCS, Serve controller, LoadBoard)."""
FRONT_DOOR_GROUPS = ("ingress", "proxy")
FLOOR_GROUPS = ("floor",)
CPU_COLUMNS = {"ingress": "Ingress", "proxy": "proxy", "tier": "tier", "ray_other": "Ray other", "floor": "floor",
               "client": "client"}


def cpu_percent(cpu_s: float, window_s: float) -> float:
    return 100 * cpu_s / window_s


def cores_per_1k_tps(cpu_s: float, window_s: float, tokens_per_s: float) -> float | None:
    """Cores busy per 1,000 tokens/s streamed; None when nothing streamed."""
    return (cpu_s / window_s) / (tokens_per_s / 1000) if tokens_per_s > 0 else None


def per_token_s(gaps_s: Sequence[float], gap_tokens: Sequence[int]) -> np.ndarray:
    """Inter-token latency samples: each gap divided by its event's tokens, once per token."""
    gaps, tokens = np.asarray(gaps_s, dtype=float), np.asarray(gap_tokens, dtype=int)
    return np.repeat(gaps / np.maximum(tokens, 1), tokens)


def _ms(seconds: Sequence[float] | np.ndarray) -> Percentiles:
    return Percentiles.of(list(np.asarray(seconds, dtype=float) * 1000))


class TargetResult(BaseModel):
    """One server (thinktier or the floor) under one variant's load."""

    target: str
    window_s: float
    offered_tps: float
    achieved_tps: float
    achieved_ratio: float
    tokens: int
    events: int
    tokens_per_event: float | None
    requests_started: int
    requests_completed: int
    errors: int
    first_error: str | None
    usage_mismatches: int
    cpu_percent: dict[str, float]
    """By process group (THINKTIER_GROUPS or FLOOR_GROUPS, and the client)."""
    process_cpu_percent: dict[str, list[float]]
    """By process group, each of its processes."""
    server_cores_per_1k_tps: float | None
    """All of the target's server processes (thinktier: tier and the rest of Ray included)."""
    front_door_cores_per_1k_tps: float | None
    """thinktier's Ingress and proxy only; the floor's one process (which also makes the tokens)."""
    ttft_ms: Percentiles
    inter_event_ms: Percentiles
    inter_token_ms: Percentiles

    @classmethod
    def of(cls, target: str, sample: ClientSample, process_cpu_s: dict[str, list[float]], cpu_window_s: float,
           window_s: float, offered_tps: float) -> TargetResult:
        """`process_cpu_s`: CPU-seconds of each process, by group, over `cpu_window_s`; the client's tokens over `window_s`."""
        achieved = sample.tokens / window_s
        cpu_s = {group: sum(seconds) for group, seconds in process_cpu_s.items()}
        servers = FLOOR_GROUPS if target == "floor" else THINKTIER_GROUPS
        front = FLOOR_GROUPS if target == "floor" else FRONT_DOOR_GROUPS
        return cls(
            target=target,
            window_s=window_s,
            offered_tps=offered_tps,
            achieved_tps=achieved,
            achieved_ratio=achieved / offered_tps,
            tokens=sample.tokens,
            events=sample.events,
            tokens_per_event=sample.tokens / sample.events if sample.events else None,
            requests_started=sample.requests_started,
            requests_completed=sample.requests_completed,
            errors=sample.errors,
            first_error=sample.first_error,
            usage_mismatches=sample.usage_mismatches,
            cpu_percent={group: cpu_percent(seconds, cpu_window_s) for group, seconds in cpu_s.items()},
            process_cpu_percent={g: [cpu_percent(x, cpu_window_s) for x in xs] for g, xs in process_cpu_s.items()},
            server_cores_per_1k_tps=cores_per_1k_tps(sum(cpu_s.get(g, 0.0) for g in servers), cpu_window_s, achieved),
            front_door_cores_per_1k_tps=cores_per_1k_tps(sum(cpu_s.get(g, 0.0) for g in front), cpu_window_s, achieved),
            ttft_ms=_ms(sample.ttft_s),
            inter_event_ms=_ms(sample.gaps_s),
            inter_token_ms=_ms(per_token_s(sample.gaps_s, sample.gap_tokens)),
        )


class Variant(BaseModel):
    interval_ms: float
    ingress_replicas: int
    tokens_per_stream_per_s: float
    streams: int

    @property
    def offered_tps(self) -> float:
        return self.streams * self.tokens_per_stream_per_s

    @property
    def label(self) -> str:
        ingress = f"{self.ingress_replicas} Ingress replica{'s' if self.ingress_replicas > 1 else ''}"
        return (f"stream_interval_ms {self.interval_ms:g}, {ingress}, {self.streams} streams x "
                f"{self.tokens_per_stream_per_s:g} tok/s = {self.offered_tps:,.0f} tok/s offered")


LATENCIES = ("ttft_ms", "inter_token_ms", "inter_event_ms")


class VariantResult(BaseModel):
    variant: Variant
    thinktier: TargetResult
    floor: TargetResult

    def added_ms(self) -> dict[str, dict[str, float | None]]:
        """thinktier's latency minus the floor's, p50 and p99, for each of LATENCIES."""
        def minus(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else a - b

        added = {}
        for name in LATENCIES:
            ours, floor = getattr(self.thinktier, name), getattr(self.floor, name)
            added[name] = {"p50": minus(ours.p50, floor.p50), "p99": minus(ours.p99, floor.p99)}
        return added


class FrontdoorReport(BaseModel):
    command: str
    settings: dict[str, Any]
    variants: list[VariantResult]


def _num(value: float | None, fmt: str = ",.0f", signed: bool = False) -> str:
    if value is None:
        return "-"
    return format(value, ("+" if signed else "") + fmt)


def _pair(p: dict[str, float | None] | Percentiles, signed: bool = False) -> str:
    p50, p99 = (p["p50"], p["p99"]) if isinstance(p, dict) else (p.p50, p.p99)
    return f"{_num(p50, '.1f', signed)} / {_num(p99, '.1f', signed)}"


def _processes(group: str, cpu_percents: list[float]) -> str:
    """'Ingress 2 (61, 58)': the group's process count and each one's CPU % (only the count for the rest of Ray)."""
    each = "" if group == "ray_other" else f" ({', '.join(f'{x:.0f}' for x in cpu_percents)})"
    return f"{CPU_COLUMNS[group]} {len(cpu_percents)}{each}"


def _row(name: str, r: TargetResult) -> str:
    cpu = " | ".join(_num(r.cpu_percent.get(g), ".0f") for g in CPU_COLUMNS)
    return (f"| {name} | {_num(r.achieved_tps)} | {r.achieved_ratio:.2f} | {cpu} | {_num(r.server_cores_per_1k_tps, '.3f')} | "
            f"{_num(r.front_door_cores_per_1k_tps, '.3f')} | {_num(r.tokens_per_event, '.1f')} | {_pair(r.ttft_ms)} | "
            f"{_pair(r.inter_token_ms)} | {_pair(r.inter_event_ms)} | {r.errors} |")


def markdown(report: FrontdoorReport) -> str:
    s = report.settings
    lines = [
        "# Front door: thinktier's HTTP path vs a bare FastAPI floor, synthetic tokens (no model)",
        "",
        f"`{report.command}`",
        "",
        f"{s['streams']} streams kept in flight (closed loop), {s['thinking_tokens']} thinking + {s['answer_tokens']} answer "
        f"tokens per request, one token per engine step; {s['duration_s']:g} s measured after a ramp of one request's "
        f"length; {s['client_procs']} client process(es). thinktier: Serve HTTP proxy -> Ingress -> synthetic tier replica "
        f"({s['tier_replicas']}); floor: one uvicorn process serving the same stream, same coalescing, same SSE framing.",
        "",
        "CPU % is of one core. Cores per 1k tok/s = cores used / (achieved tok/s / 1000): *server* counts all the "
        "target's processes (thinktier: Ingress, proxy, tier, rest of Ray), *front door* thinktier's Ingress and proxy "
        "(the floor's one process). Inter-token latency = gap between events / tokens in the event, over tokens.",
        "",
        "## Summary",
        "",
        "| variant | offered tok/s | thinktier tok/s | floor tok/s | thinktier server cores per 1k tok/s | "
        "floor cores per 1k tok/s | added TTFT p50 / p99 ms | added inter-token p50 / p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v in report.variants:
        added = v.added_ms()
        lines.append(
            f"| {v.variant.label} | {_num(v.variant.offered_tps)} | {_num(v.thinktier.achieved_tps)} | "
            f"{_num(v.floor.achieved_tps)} | {_num(v.thinktier.server_cores_per_1k_tps, '.3f')} | "
            f"{_num(v.floor.server_cores_per_1k_tps, '.3f')} | {_pair(added['ttft_ms'], True)} | "
            f"{_pair(added['inter_token_ms'], True)} |"
        )
    cpu_head = " | ".join(f"CPU % {c}" for c in CPU_COLUMNS.values())
    for v in report.variants:
        added = v.added_ms()
        lines += [
            "",
            f"## {v.variant.label}",
            "",
            f"| path | achieved tok/s | achieved / offered | {cpu_head} | server cores per 1k tok/s | front door cores per "
            "1k tok/s | tokens per event | TTFT p50 / p99 ms | inter-token p50 / p99 ms | inter-event p50 / p99 ms | errors |",
            "|---" * (10 + len(CPU_COLUMNS)) + "|",
            _row("thinktier", v.thinktier),
            _row("floor (bare FastAPI)", v.floor),
            f"| added by thinktier | | |{' |' * len(CPU_COLUMNS)} | | | {_pair(added['ttft_ms'], True)} | "
            f"{_pair(added['inter_token_ms'], True)} | {_pair(added['inter_event_ms'], True)} | |",
        ]
        lines.append("")
        for r in (v.thinktier, v.floor):
            each = ", ".join(_processes(g, xs) for g, xs in r.process_cpu_percent.items())
            lines.append(f"{r.target} processes (CPU % of each): {each}.")
            if r.errors or r.usage_mismatches:
                lines.append(f"{r.target}: {r.errors} errors (first: {r.first_error}), {r.usage_mismatches} requests whose "
                             "usage differs from the tokens streamed.")
    return "\n".join(lines) + "\n"


def plot(report: FrontdoorReport, path: Path) -> None:
    """Achieved tokens/s and server cores per 1k tokens/s, thinktier beside the floor, per variant."""
    import matplotlib.pyplot as plt

    from thinktier.loadtest.plots import save_figure

    labels = [f"{v.variant.interval_ms:g} ms\n{v.variant.ingress_replicas} Ingress\n{v.variant.offered_tps:,.0f} offered"
              for v in report.variants]
    x = np.arange(len(labels))
    fig, (tps, cores) = plt.subplots(1, 2, figsize=(max(8, 2.4 * len(labels)), 4.5))
    for offset, target in ((-0.2, "thinktier"), (0.2, "floor")):
        results = [getattr(v, target) for v in report.variants]
        tps.bar(x + offset, [r.achieved_tps for r in results], 0.4, label=target)
        cores.bar(x + offset, [r.server_cores_per_1k_tps or 0 for r in results], 0.4, label=target)
    tps.scatter(x, [v.variant.offered_tps for v in report.variants], marker="_", s=900, color="black", label="offered")
    tps.set_ylabel("streamed tokens/s")
    cores.set_ylabel("server CPU cores per 1,000 tokens/s")
    for ax in (tps, cores):
        ax.set_xticks(x, labels)
        ax.legend()
    fig.suptitle("Front door: thinktier (proxy -> Ingress -> tier) vs bare FastAPI")
    save_figure(fig, path, dpi=120)


def write(report: FrontdoorReport, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "frontdoor.json", out_dir / "frontdoor.md", out_dir / "frontdoor.png"]
    paths[0].write_text(report.model_dump_json(indent=2) + "\n")
    paths[1].write_text(markdown(report))
    plot(report, paths[2])
    return paths
