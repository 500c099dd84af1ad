"""What the driver measures while a config runs: CPU per process class, the engine series of /metrics and GPU
utilization, sampled on a thread; and the statistics of the samples in the load test's window."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import httpx
from prometheus_client.parser import text_string_to_metric_families

from thinktier.loadtest.bench.fullstack.fullstack_record import CpuStat, GpuStat, Sample
from thinktier.loadtest.bench.fullstack.fullstack_settings import Clock
from thinktier.loadtest.bench.fullstack.fullstack_targets import Series
from thinktier.loadtest.bench.gpu.gpu_device import nvidia_smi
from thinktier.loadtest.bench.process_cpu import ClassCPU, by_class, process_loads, read_processes

LABEL_ORDER = ("tier", "replica")
"""Labels that lead a series key (other labels follow by name): 'tier/replica'."""
PRINT_EVERY_S = 10.0


def series_key(labels: dict[str, str], keep: dict[str, str] | None = None) -> str:
    """Label values joined by '/', 'tier' and 'replica' first; with `keep`, only those labels, renamed."""
    if keep is not None:
        labels = {keep[n]: v for n, v in labels.items() if n in keep}
    names = sorted(labels, key=lambda n: (LABEL_ORDER.index(n) if n in LABEL_ORDER else len(LABEL_ORDER), n))
    return "/".join(labels[n] for n in names)


def parse_series(text: str, series: Series) -> dict[str, dict[str, float]]:
    """{recorded name: {label values joined by '/' (e.g. 'tier/replica'): value}} from a /metrics page."""
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in series.names:
                out.setdefault(series.names[sample.name], {})[series_key(sample.labels, series.labels)] = sample.value
    return out


def fetch_series(metrics_url: str, series: Series, timeout_s: float) -> dict[str, dict[str, float]]:
    response = httpx.get(metrics_url, timeout=timeout_s)
    response.raise_for_status()
    return parse_series(response.text, series)


def gpu_stats() -> list[GpuStat]:
    rows = nvidia_smi("query-gpu", "index", "utilization.gpu", "memory.used")
    stats = []
    for row in rows:
        try:
            stats.append(GpuStat(index=int(row[0]), util_percent=float(row[1]), memory_mib=float(row[2])))
        except (ValueError, IndexError):  # '[N/A]'
            continue
    return stats


def gpu_pids() -> list[int]:
    return [int(row[0]) for row in nvidia_smi("query-compute-apps", "pid") if row and row[0].isdigit()]


def sample_line(sample: Sample) -> str:
    cpu = " ".join(f"{c} {v.percent:.0f}%" + (f" ({v.processes})" if v.processes > 1 else "") for c, v in sample.cpu.items())
    engine = " ".join(
        f"{series.removeprefix('requests_')} {{{', '.join(f'{k}: {v:.2g}' for k, v in values.items())}}}"
        for series, values in sample.engine.items()
    )
    gpu = " ".join(f"gpu{g.index} {g.util_percent:.0f}%" for g in sample.gpu)
    return f"t={sample.t_s:5.1f}s cpu {cpu} | {engine or sample.metrics_error or '-'} | {gpu or 'no nvidia-smi'}"


class Sampler(threading.Thread):
    """Every `every_s` seconds: CPU per process since the last reading, the engine series, GPU utilization."""

    def __init__(self, metrics_url: str, series: Series, every_s: float, clock: Clock) -> None:
        super().__init__(daemon=True)
        self.metrics_url = metrics_url
        self.series = series
        self.every_s = every_s
        self.clock = clock
        self.samples: list[Sample] = []
        self._done = threading.Event()

    def run(self) -> None:
        t0 = previous_t = time.monotonic()
        previous = read_processes()
        printed = -PRINT_EVERY_S
        while not self._done.wait(self.every_s):
            now = time.monotonic()
            current = read_processes()
            loads = process_loads(previous, current, now - previous_t)
            sample = Sample(
                t_s=round(now - t0, 2), dt_s=round(now - previous_t, 3), cpu=by_class(loads),
                top=[p for p in loads if p.percent >= 5], engine={}, gpu=gpu_stats(),
            )
            try:
                sample.engine = fetch_series(self.metrics_url, self.series, timeout_s=min(self.every_s, 3.0))
            except (httpx.HTTPError, ValueError) as exc:
                sample.metrics_error = f"{type(exc).__name__}: {exc}"[:200]
            self.samples.append(sample)
            if sample.t_s - printed >= PRINT_EVERY_S:
                self.clock.log("  " + sample_line(sample))
                printed = sample.t_s
            previous, previous_t = current, now

    def finish(self) -> list[Sample]:
        self._done.set()
        self.join(30)
        return self.samples


def in_window(sample: Sample, window: tuple[float, float] | None) -> bool:
    """Whether the middle of the sample's interval lies in the window (all samples when None)."""
    return window is None or window[0] <= sample.t_s - sample.dt_s / 2 <= window[1]


def cpu_stats(samples: Sequence[Sample], window: tuple[float, float] | None = None) -> dict[str, CpuStat]:
    """Per class over the samples in the window; a class missing from a sample counts as 0% there."""
    chosen = [s for s in samples if in_window(s, window)]
    seconds = sum(s.dt_s for s in chosen)
    zero = ClassCPU(percent=0.0, busiest=0.0, processes=0)
    stats = {}
    for c in sorted({c for s in chosen for c in s.cpu}):
        values = [(s.cpu.get(c, zero), s.dt_s) for s in chosen]
        stats[c] = CpuStat(
            mean=sum(v.percent * dt for v, dt in values) / seconds if seconds > 0 else None,
            max=max(v.percent for v, _ in values),
            busiest_max=max(v.busiest for v, _ in values),
        )
    return stats


def load_window(samples: Sequence[Sample], duration_s: float) -> tuple[float, float]:
    """The arrival window within the timeline. The load test process spends its first seconds importing and
    loading prompts, so the window starts at the interval in which the engines first had work (the warm-up and
    the idle probe are over by then); at 0 when no sample saw any."""
    busy = (
        s for s in samples
        if any(v > 0 for k in ("requests_running", "requests_waiting") for v in s.engine.get(k, {}).values())
    )
    first = next(busy, None)
    start = max(0.0, first.t_s - first.dt_s) if first else 0.0
    return start, start + duration_s
