"""The full-stack driver: per config, start it (`thinktier up` on a policy, or the Ray Serve LLM peer on a policy's
tier), a warm-up, an idle probe and the seeded load test while CPU, /metrics and GPUs are sampled, then a stop that
leaves the GPUs empty for the next config.

Beside it: fullstack_settings.py (arguments, clock), fullstack_server.py, fullstack_sampler.py, fullstack_requests.py
(warm-up, idle probe, the load test's command), fullstack_targets.py (what a config starts), fullstack_record.py (what
it saves), fullstack_report.py (fullstack.md) and fullstack_compare.py (compare.md and plots)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from thinktier.loadtest.bench.fullstack.fullstack_record import ConfigRun
from thinktier.loadtest.bench.fullstack.fullstack_report import fmt, saved_report, summary_line, summary_row, write_summary
from thinktier.loadtest.bench.fullstack.fullstack_requests import failures, idle_probe, loadtest_command, warm_up
from thinktier.loadtest.bench.fullstack.fullstack_sampler import Sampler, cpu_stats, fetch_series, gpu_stats, load_window
from thinktier.loadtest.bench.fullstack.fullstack_server import (
    ENGINE_LOG_MARKS,
    RAY_ERROR_MARKS,
    ServerProcess,
    ray_log_lines,
    wait_gpus_empty,
)
from thinktier.loadtest.bench.fullstack.fullstack_settings import STOP_RESERVE_S, Clock, Settings, min_left_s
from thinktier.loadtest.bench.fullstack.fullstack_targets import Config
from thinktier.loadtest.report_rebuild import read_jsonl
from thinktier.policies.loader import load_policy
from thinktier.policies.schema import Policy


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
