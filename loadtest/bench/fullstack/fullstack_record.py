"""What a full-stack run saves per policy (NAME-fullstack.json): the models the driver fills and the report reads."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from thinktier.loadtest.bench.process_cpu import ClassCPU, TopProcess

IDLE_ANSWER_TOKENS = 256
"""Tokens in each reply of the idle probe."""


class GpuStat(BaseModel):
    index: int
    util_percent: float
    memory_mib: float


class Sample(BaseModel):
    """One sampling interval, ending `t_s` seconds after the load test started."""

    t_s: float
    dt_s: float
    cpu: dict[str, ClassCPU]
    top: list[TopProcess]
    """Processes at 5% or more, busiest first."""
    engine: dict[str, dict[str, float]]
    """thinktier's engine series (prefix dropped) by 'tier/replica'."""
    gpu: list[GpuStat]
    metrics_error: str | None = None


class CpuStat(BaseModel):
    """A class's CPU % over a window: time-weighted mean and max of the class total, max of its busiest process."""

    mean: float | None
    max: float | None
    busiest_max: float | None


class ProbeReply(BaseModel):
    status: int | None
    error: str | None
    tier: str | None
    ttft_s: float | None
    ttfvt_s: float | None
    e2e_s: float | None
    completion_tokens: int | None


class IdleProbe(BaseModel):
    """Sequential streamed replies of IDLE_ANSWER_TOKENS tokens, no thinking, on idle engines."""

    model: str
    replies: list[ProbeReply]
    ttft_median_s: float | None
    e2e_median_s: float | None
    tokens_median: float | None


class Failures(BaseModel):
    """Requests of a load test by outcome, from its requests.jsonl (errors and shed as in its report)."""

    requests: int
    errors: int
    """Failed for any reason but a 429."""
    shed: int
    no_response: int
    """No response headers, or a request cut by --request-timeout (the runner drops a cut request's partial stream)."""
    timeouts: int
    """Cut by --request-timeout."""


class ConfigRun(BaseModel):
    """Everything measured for one config; saved as NAME-fullstack.json."""

    name: str
    kind: str = "thinktier"
    """What served it: 'thinktier', or 'ray-serve-llm' (the peer on the policy's reasoning tier)."""
    policy: str
    policy_yaml: str | None = None
    """The policy file's text as served (runs saved before it was recorded have none)."""
    started_unix: float
    up_s: float | None = None
    error: str | None = None
    warm_up: dict[str, int] = {}
    """'status tier' of the warm-up replies, counted."""
    gpu_after_up: list[GpuStat] = []
    engine_log_lines: list[str] = []
    idle: IdleProbe | None = None
    load_command: list[str] = []
    load_rc: int | None = None
    load_log_tail: list[str] = []
    load_wall_s: float | None = None
    load_window_s: tuple[float, float] | None = None
    """The arrival window within the timeline: from the first sample that saw engine work, `duration` long."""
    cpu_load: dict[str, CpuStat] = {}
    cpu_run: dict[str, CpuStat] = {}
    """Over the whole load test process: arrivals, the drain of the last requests, its own start and report."""
    failures: Failures | None = None
    final_metrics: dict[str, dict[str, float]] = {}
    stop_s: float | None = None
    timeline: list[Sample] = []


def saved_runs(out_dir: Path) -> list[ConfigRun]:
    """Every NAME-fullstack.json in `out_dir`, in the order the configs started."""
    runs = (ConfigRun.model_validate_json(p.read_text()) for p in out_dir.glob("*-fullstack.json"))
    return sorted(runs, key=lambda r: r.started_unix)
