"""The full-stack driver: per config, start it (`thinktier up` on a policy, or the Ray Serve LLM peer on a policy's
tier), a warm-up, an idle probe and the seeded load test while CPU, /metrics and GPUs are sampled, then a stop that
leaves the GPUs empty for the next config."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from thinktier.loadtest.bench.fullstack_record import (
    ConfigRun,
    CpuStat,
    Failures,
    GpuStat,
    IdleProbe,
    ProbeReply,
    Sample,
    read_jsonl,
)
from thinktier.loadtest.bench.fullstack_report import fmt, saved_report, summary_line, summary_row, write_summary
from thinktier.loadtest.bench.fullstack_targets import AUTO_MODEL, Config, Series
from thinktier.loadtest.bench.process_cpu import ClassCPU, by_class, process_loads, read_processes
from thinktier.loadtest.client import RequestOptions, RequestResult, send
from thinktier.loadtest.ray_llm_target import PEER_READY_LINE
from thinktier.loadtest.workload import Prompt, WorkItem
from thinktier.policies.loader import load_policy
from thinktier.policies.schema import Policy

STARTUP_S = 150.0
"""`thinktier up` to /readyz on the GPU machine: ~150 s for the engines (173 s in the pilot)."""
STOP_RESERVE_S = 60.0
"""Time kept for stopping thinktier when the load test's time limit is set."""
MIN_CONFIG_S = STARTUP_S + 30 + STOP_RESERVE_S
"""Time a policy needs before the deadline besides its arrival window: start-up, a short drain, the stop."""
IDLE_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
UP_ERROR_MARKS = ("thinktier up:", "Traceback", "Error", PEER_READY_LINE)
"""Lines of the server's log worth printing besides `up`'s progress lines, which start with '[elapsed]'."""
RAY_LOGS = Path("/tmp/ray/session_latest/logs")
RAY_ERROR_MARKS = ("Error", "Traceback", "CUDA out of memory", "Exception", "Failed to")
RAY_LOG_SUFFIXES = (".log", ".err", ".out")
"""Ray's log files; its debug_state*.txt count failures by the dozen, mostly zero."""
ENGINE_LOG_MARKS = ("GPU KV cache size", "Maximum concurrency")
LABEL_ORDER = ("tier", "replica")
"""Labels that lead a series key (other labels follow by name): 'tier/replica'."""
PRINT_EVERY_S = 10.0


# ---- settings and clock -------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadArgs:
    """The `thinktier loadtest run` arguments every policy gets."""

    slo_policy: Path
    rate: float
    shape: float
    duration_s: float
    seed: int
    mix: str
    request_timeout_s: float


@dataclass(frozen=True)
class Settings:
    out: Path
    load: LoadArgs
    port: int = 8000
    ready_timeout_s: float = 300.0
    sample_every_s: float = 2.0
    deadline_s: float = 570.0
    """Seconds from the start by which everything must be done."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Clock:
    """Time since the driver started, the time left before its deadline, and timestamped log lines."""

    def __init__(self, deadline_s: float) -> None:
        self.t0 = time.monotonic()
        self.deadline_s = deadline_s

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.deadline_s - self.elapsed()

    def budget(self, wanted_s: float, reserve_s: float) -> float:
        """`wanted_s`, or less so that `reserve_s` remain before the deadline (never below 1 s)."""
        return max(1.0, min(wanted_s, self.left() - reserve_s))

    def log(self, message: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {message}", flush=True)


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


# ---- /metrics, nvidia-smi, Ray logs -------------------------------------------------------------


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


def nvidia_smi(query: str, *fields: str) -> list[list[str]]:
    """CSV rows of an nvidia-smi query (e.g. 'query-gpu'); none where nvidia-smi is missing or fails."""
    if shutil.which("nvidia-smi") is None:
        return []
    args = ["nvidia-smi", f"--{query}={','.join(fields)}", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        return []
    return [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


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


def ray_log_lines(marks: Sequence[str], limit: int, since_unix: float, root: Path = RAY_LOGS) -> list[str]:
    """The last `limit` lines that contain one of `marks` in the Ray session's logs written since `since_unix`
    (older ones belong to an earlier policy's session), each with its file name."""
    hits: list[str] = []
    for path in sorted(root.rglob("*")) if root.exists() else []:
        try:
            if path.suffix not in RAY_LOG_SUFFIXES or path.stat().st_mtime < since_unix or path.stat().st_size > 50_000_000:
                continue
            with path.open(errors="replace") as lines:
                hits += [f"{path.name}: {line.rstrip()[:260]}" for line in lines if any(m in line for m in marks)]
        except OSError:
            continue
    return hits[-limit:]


# ---- the sampler --------------------------------------------------------------------------------


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


# ---- the server ---------------------------------------------------------------------------------


class ServerProcess:
    """The config's server (`thinktier up`, or the peer) in its own process group (so that a stop reaches what it
    started), output to a log file."""

    def __init__(self, command: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self._seen = 0
        with log_path.open("w") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )

    def log_lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()

    def new_lines(self) -> list[str]:
        lines = self.log_lines()
        new, self._seen = lines[self._seen :], len(lines)
        return new

    def wait_ready(self, ready_url: str, timeout_s: float, mark: str | None = None) -> str | None:
        """None once GET `ready_url` answers 200 and, when given, the server has printed a line starting with `mark`;
        otherwise why not. New progress and error lines are printed."""
        deadline = time.monotonic() + timeout_s
        marked = mark is None
        while time.monotonic() < deadline:
            for line in self.new_lines():
                marked = marked or line.startswith(mark or "")
                if line.startswith("[") or any(m in line for m in UP_ERROR_MARKS):
                    print("    up| " + line[:240], flush=True)
            if self.process.poll() is not None:
                return f"the server exited with {self.process.returncode}"
            try:
                if marked and httpx.get(ready_url, timeout=5).status_code == 200:
                    return None
            except httpx.HTTPError:
                pass
            time.sleep(2)
        return f"not ready after {timeout_s:.0f} s"

    def stop(self, wait_s: float, clock: Clock) -> None:
        """SIGINT to the group (the server stops Serve and Ray), then SIGKILL to whatever of the group is left."""
        try:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGINT)
                self.process.wait(wait_s)
        except subprocess.TimeoutExpired:
            clock.log(f"  the server did not stop in {wait_s:.0f} s; SIGKILL")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)


def wait_gpus_empty(timeout_s: float, clock: Clock) -> None:
    """Wait until no process holds a GPU, then SIGKILL those left: on the lent machine they are all ours."""
    deadline = time.monotonic() + timeout_s
    while (pids := gpu_pids()) and time.monotonic() < deadline:
        time.sleep(2)
    for pid in pids:
        clock.log(f"  GPU process {pid} left after the stop; SIGKILL")
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError as exc:
            clock.log(f"  kill {pid}: {exc}")
    if pids:
        time.sleep(3)


# ---- requests -----------------------------------------------------------------------------------


def _item(index: int, text: str) -> WorkItem:
    return WorkItem(index, Prompt(f"fullstack-{index}", text, "chat", "fullstack"))


async def _send_all(
    url: str, bodies: Sequence[tuple[RequestOptions, str]], sequential: bool, timeout_s: float
) -> list[RequestResult]:
    completions = f"{url}/v1/chat/completions"
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        t0 = time.perf_counter()
        calls = [send(client, completions, _item(i, text), options, t0) for i, (options, text) in enumerate(bodies)]
        if sequential:
            return [await call for call in calls]
        return list(await asyncio.gather(*calls))


def warm_up(url: str, config: Config, policy: Policy) -> dict[str, int]:
    """The config's warm-up requests at once. Returns the replies' 'status tier', counted."""
    results = asyncio.run(_send_all(url, config.warm_up_bodies(policy), sequential=False, timeout_s=60))
    return dict(Counter(f"{r.status} {r.decision.get('tier', '-')}" for r in results))


def _median(values: Iterable[float | int | None]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return statistics.median(present) if present else None


def idle_summary(model: str, results: Sequence[RequestResult]) -> IdleProbe:
    replies = [
        ProbeReply(status=r.status, error=r.error, tier=r.decision.get("tier"), ttft_s=r.ttft_s, ttfvt_s=r.ttfvt_s,
                   e2e_s=r.e2e_s, completion_tokens=r.completion_tokens)
        for r in results
    ]
    ok = [r for r in replies if r.status == 200 and r.error is None]
    return IdleProbe(
        model=model, replies=replies, ttft_median_s=_median(r.ttft_s for r in ok), e2e_median_s=_median(r.e2e_s for r in ok),
        tokens_median=_median(r.completion_tokens for r in ok),
    )


def idle_probe(url: str, config: Config, policy: Policy, requests: int = 3) -> IdleProbe:
    options = config.idle_options(policy)
    results = asyncio.run(_send_all(url, [(options, IDLE_PROMPT)] * requests, sequential=True, timeout_s=120))
    return idle_summary(options.model or AUTO_MODEL, results)


# ---- the load test ------------------------------------------------------------------------------


def loadtest_command(url: str, load: LoadArgs, out_dir: Path, extra: Sequence[str] = ()) -> list[str]:
    return [
        sys.executable, "-m", "thinktier", "loadtest", "run", "--url", url, "--policy", str(load.slo_policy),
        "--rate", str(load.rate), "--shape", str(load.shape), "--duration", str(load.duration_s), "--seed", str(load.seed),
        "--mix", load.mix, "--request-timeout", str(load.request_timeout_s), "--no-progress", "--out", str(out_dir), *extra,
    ]


def failures(rows: Sequence[dict]) -> Failures:
    """Counted from requests.jsonl rows, read back as the RequestResults they were, so `ok` and `shed` mean what
    they mean in the report."""
    results = [RequestResult.from_row(row) for row in rows]
    return Failures(
        requests=len(results),
        errors=sum(not r.ok and not r.shed for r in results),
        shed=sum(r.shed for r in results),
        no_response=sum(r.status is None for r in results),
        timeouts=sum("--request-timeout" in (r.error or "") for r in results),
    )


def run_load(record: ConfigRun, config: Config, policy: Policy, settings: Settings, clock: Clock) -> None:
    """The load test as a subprocess while the sampler runs; its report and requests are copied to --out, the end
    of its output kept in the record."""
    out, name = settings.out, record.name
    with tempfile.TemporaryDirectory(prefix=f"thinktier-fullstack-{name}-") as tmp:
        report_dir, log_path = Path(tmp) / "loadtest", Path(tmp) / "loadtest.log"
        record.load_command = loadtest_command(
            settings.url, settings.load, report_dir, config.loadtest_args(policy, settings.url)
        )
        natural = settings.load.duration_s + settings.load.request_timeout_s + 60
        limit = clock.budget(natural, STOP_RESERVE_S)
        clock.log(f"  load test (cut after {limit:.0f} s): {' '.join(record.load_command[3:])}")
        sampler = Sampler(config.metrics_url(settings.url), config.engine_series, settings.sample_every_s, clock)
        sampler.start()
        started = time.monotonic()
        with log_path.open("w") as log:
            try:
                record.load_rc = subprocess.run(
                    record.load_command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=limit
                ).returncode
            except subprocess.TimeoutExpired:
                record.error = f"load test cut after {limit:.0f} s (deadline)"
        if record.load_rc:
            record.error = f"load test exited with {record.load_rc}"
        record.load_wall_s = round(time.monotonic() - started, 1)
        record.timeline = sampler.finish()
        record.load_log_tail = log_path.read_text(errors="replace").splitlines()[-20:]
        for src in ("report.json", "report.md", "requests.jsonl"):
            if (report_dir / src).exists():
                shutil.copy(report_dir / src, out / f"{name}-{src}")
    clock.log(f"  load test rc {record.load_rc} after {record.load_wall_s} s; its output ends:")
    for line in record.load_log_tail[-8:]:
        print("    lt| " + line[:240], flush=True)
    record.load_window_s = load_window(record.timeline, settings.load.duration_s)
    record.cpu_load = cpu_stats(record.timeline, record.load_window_s)
    record.cpu_run = cpu_stats(record.timeline)
    if (out / f"{name}-requests.jsonl").exists():
        record.failures = failures(read_jsonl(out / f"{name}-requests.jsonl"))
    try:
        record.final_metrics = fetch_series(config.metrics_url(settings.url), config.final_series, timeout_s=10)
    except (httpx.HTTPError, ValueError) as exc:
        clock.log(f"  final /metrics failed: {exc}")


# ---- one policy, all policies -------------------------------------------------------------------


def run_config(config: Config, settings: Settings, clock: Clock) -> ConfigRun:
    """Start, measure and stop one config. Never raises for the stack's trouble: that is recorded in `error`."""
    out, name = settings.out, config.name
    record = ConfigRun(
        name=name, kind=config.kind, policy=str(config.policy), policy_yaml=config.policy.read_text(),
        started_unix=time.time(),
    )
    clock.log(f"===== {name}: {config.kind} on {config.policy}")
    policy = load_policy(config.policy)
    started = time.monotonic()
    up = ServerProcess(config.start_command(settings.port, settings.ready_timeout_s), out / f"{name}-up.log")
    try:
        ready_url = settings.url + config.ready_path()
        record.error = up.wait_ready(
            ready_url, clock.budget(settings.ready_timeout_s + 20, STOP_RESERVE_S), config.ready_mark()
        )
        record.up_s = round(time.monotonic() - started, 1)
        if record.error is not None:
            clock.log(f"  NOT READY ({record.error}) after {record.up_s} s; the up log ends:")
            for line in up.log_lines()[-30:]:
                print("    up| " + line[:300], flush=True)
            for line in ray_log_lines(RAY_ERROR_MARKS, 30, record.started_unix):
                print("    ray| " + line, flush=True)
            return record
        record.gpu_after_up = gpu_stats()
        record.engine_log_lines = ray_log_lines(ENGINE_LOG_MARKS, 12, record.started_unix)
        clock.log(f"  {config.ready_path()} 200 after {record.up_s} s; GPUs {[g.model_dump() for g in record.gpu_after_up]}")
        for line in record.engine_log_lines:
            print("    ray| " + line, flush=True)
        record.warm_up = warm_up(settings.url, config, policy)
        clock.log(f"  warm-up: {record.warm_up}")
        record.idle = idle_probe(settings.url, config, policy)
        clock.log(f"  idle probe ({record.idle.model}): " + "; ".join(
            f"{r.status} ttft {fmt(r.ttft_s)} s e2e {fmt(r.e2e_s)} s {r.completion_tokens} tok" for r in record.idle.replies
        ))
        run_load(record, config, policy, settings, clock)
    except Exception as exc:  # the run goes on to the next policy; the cause is kept
        record.error = f"{type(exc).__name__}: {exc}"
        clock.log(f"  {name} failed: {record.error}")
    finally:
        clock.log(f"  stopping {config.kind} ({name})")
        stopping = time.monotonic()
        up.stop(clock.budget(90, 20), clock)
        wait_gpus_empty(clock.budget(60, 5), clock)
        record.stop_s = round(time.monotonic() - stopping, 1)
        clock.log(f"  stopped in {record.stop_s} s; GPUs {[g.model_dump() for g in gpu_stats()]}")
        (out / f"{name}-fullstack.json").write_text(record.model_dump_json(indent=1))
    return record


def min_left_s(load: LoadArgs) -> float:
    """Time a policy needs before the deadline to end with a report; one started with less only spends device time."""
    return MIN_CONFIG_S + load.duration_s


def run(configs: Sequence[Config], settings: Settings) -> list[ConfigRun]:
    """Every policy in order, each skipped when less than `min_left_s` remain; fullstack.md and a SUMMARY line after
    each. Files in the output folder, five per policy and one in all, since the GPU machine returns at most 8 files a
    call: NAME-up.log, NAME-report.{json,md}, NAME-requests.jsonl, NAME-fullstack.json, and fullstack.md, which
    `summarize` rebuilds from the saved JSON anywhere."""
    clock = Clock(settings.deadline_s)
    settings.out.mkdir(parents=True, exist_ok=True)
    needed = min_left_s(settings.load)
    runs = []
    for config in configs:
        if clock.left() < needed:
            clock.log(f"SKIP {config.name}: {clock.left():.0f} s left before the deadline, {needed:.0f} s needed")
            continue
        record = run_config(config, settings, clock)
        runs.append(record)
        write_summary(settings.out)
        print(summary_line(summary_row(record, saved_report(settings.out, config.name))), flush=True)
    clock.log("done")
    return runs
