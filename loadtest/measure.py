"""One load test from start to finish: build the workload, run it (a run per offered rate, or the closed-loop
batches), and write the report, the raw requests and the plots into one folder."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from pathlib import Path

from thinktier.loadtest.report import Report, build_report, write
from thinktier.loadtest.runner import RunRecord, RunSettings, Target, run_closed_loop, run_open_loop
from thinktier.loadtest.workload import Mix, PromptPool, WorkItem, closed_loop, open_loop
from thinktier.policies.schema import SLO, DifficultyClass


@dataclass(frozen=True)
class LoadSpec:
    """The workload: open loop at each rate in `rates` for `duration_s`, or closed loop when `batch_size` is set."""

    mix: Mix
    rates: tuple[float, ...] = (1.0,)
    shape: float = 1.0
    duration_s: float = 60.0
    batch_size: int | None = None
    batches: int = 1
    seed: int = 0
    prompts: str | None = None
    """Where the prompts were drawn from (`--prompts`), recorded in the report's settings."""

    def settings(self) -> dict[str, object]:
        base: dict[str, object] = {"mix": str(self.mix), "seed": self.seed}
        if self.prompts is not None:
            base["prompts"] = self.prompts
        if self.batch_size is not None:
            return {**base, "mode": "closed", "batch_size": self.batch_size, "batches": self.batches}
        return {
            **base,
            "mode": "open",
            "rates": ",".join(f"{r:g}" for r in self.rates),
            "shape": self.shape,
            "duration_s": self.duration_s,
        }


def _open_loop(spec: LoadSpec, pool: PromptPool, rate: float) -> list[WorkItem]:
    return open_loop(pool, spec.mix, rate, spec.shape, spec.duration_s, spec.seed)


def _closed_loop(spec: LoadSpec, pool: PromptPool, batch_size: int) -> list[list[WorkItem]]:
    return closed_loop(pool, spec.mix, batch_size, spec.batches, spec.seed)


def work_items(spec: LoadSpec, pool: PromptPool) -> list[WorkItem]:
    """Every request the spec sends, over all its runs."""
    if spec.batch_size is not None:
        return [item for batch in _closed_loop(spec, pool, spec.batch_size) for item in batch]
    return [item for rate in spec.rates for item in _open_loop(spec, pool, rate)]


def run_all(target: Target, spec: LoadSpec, pool: PromptPool, settings: RunSettings) -> list[RunRecord]:
    """Every run of the spec, one after the other, each with the same seed (same prompts in the same order)."""
    if spec.batch_size is not None:
        batches = _closed_loop(spec, pool, spec.batch_size)
        return [asyncio.run(run_closed_loop(target, batches, settings, f"batch={spec.batch_size}"))]
    return [
        asyncio.run(run_open_loop(target, _open_loop(spec, pool, rate), settings, f"rate={rate:g}", rate, spec.shape,
                                  spec.duration_s))
        for rate in spec.rates
    ]


def measure(
    target: Target,
    spec: LoadSpec,
    pool: PromptPool,
    slos: dict[DifficultyClass, SLO],
    out_dir: Path,
    settings: RunSettings | None = None,
) -> tuple[Report, list[Path]]:
    """Run the load test and write report.json, report.md, requests.jsonl and the PNG plots into `out_dir`."""
    from thinktier.loadtest.plots import write_plots  # lazily: matplotlib is slow to import and only needed here

    settings = settings or RunSettings()
    records = run_all(target, spec, pool, settings)
    options = {k: v for k, v in asdict(target.options).items() if v is not None and k != "api_key"}
    report = build_report(target.url, {**spec.settings(), **options}, slos, records)
    paths = write(report, records, out_dir)
    paths += write_plots(report, records, out_dir)
    return report, paths
