"""The full-stack driver's CPU-side parts: per-process CPU from /proc and its classes, window statistics,
/metrics parsing, the idle probe's requests, and fullstack.md from saved JSON. No Ray, no GPU."""

from __future__ import annotations

import argparse
import http.server
import json
import shlex
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from thinktier.cli.bench_fullstack import add_fullstack
from thinktier.cli.main import build_parser
from thinktier.deployments.request.metrics import ServiceMetrics
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.loadtest.bench.fullstack.fullstack_record import ConfigRun, CpuStat, Failures, IdleProbe, Sample
from thinktier.loadtest.bench.fullstack.fullstack_report import summary_line, summary_row, write_summary
from thinktier.loadtest.bench.fullstack.fullstack_requests import failures, idle_summary, loadtest_command
from thinktier.loadtest.bench.fullstack.fullstack_sampler import cpu_stats, load_window, parse_series
from thinktier.loadtest.bench.fullstack.fullstack_server import ServerProcess
from thinktier.loadtest.bench.fullstack.fullstack_settings import MIN_CONFIG_S, Clock, LoadArgs, min_left_s
from thinktier.loadtest.bench.fullstack.fullstack_targets import PEER_FINAL, THINKTIER_FINAL, Config
from thinktier.loadtest.bench.process_cpu import ClassCPU, ProcCPU, by_class, classify, parse_stat, process_loads, read_processes
from thinktier.loadtest.client import RequestResult
from thinktier.loadtest.metrics_scraper import MetricsTimeline, TierSample
from thinktier.loadtest.ray_llm_target import PEER_READY_LINE
from thinktier.loadtest.report import Report, build_report
from thinktier.loadtest.runner import RunRecord
from thinktier.loadtest.workload import Mix
from thinktier.policies.loader import load_policy
from thinktier.policies.schema import SLO

EXAMPLES = Path(__file__).resolve().parents[2] / "policies" / "examples"
TIERED, ONEPOOL = EXAMPLES / "gpu-tiered.yaml", EXAMPLES / "gpu-onepool.yaml"
PEER = Config("ray-serve-llm", ONEPOOL, "ray-serve-llm")
HZ = 100

# ---- /proc ------------------------------------------------------------------------------------------


def stat_line(pid: int, comm: str, utime: int, stime: int, start: int) -> str:
    """A /proc/PID/stat line: utime, stime and starttime are fields 14, 15 and 22."""
    fields = ["S", "1", *["0"] * 9, str(utime), str(stime), *["0"] * 6, str(start), "0"]
    return f"{pid} ({comm}) " + " ".join(fields) + "\n"


def write_proc(root: Path, pid: int, comm: str, cmdline: str, utime: int, stime: int, start: int = 500) -> None:
    folder = root / str(pid)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stat").write_text(stat_line(pid, comm, utime, stime, start))
    (folder / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode() + b"\0")


def test_stat_fields_are_counted_after_the_last_parenthesis() -> None:
    comm, start, cpu_s = parse_stat(stat_line(7, "odd) (name", utime=250, stime=50, start=1234), HZ)
    assert (comm, start, cpu_s) == ("odd) (name", 1234, 3.0)


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("ray::ServeReplica:thinktier:Ingress.handle_request_with_rejection", "ingress"),
        ("ray::ServeReplica:thinktier:Ingress", "ingress"),
        ("ray::ProxyActor.receive_asgi_messages", "proxy"),
        ("ray::ServeReplica:thinktier:tier-reasoning.handle_request_with_rejection", "tier"),
        ("ray::ServeReplica:thinktier:tier-chat", "tier"),
        ("VLLM::EngineCore", "engine"),
        ("/usr/bin/python3 -m thinktier loadtest run --url http://127.0.0.1:8000 --policy p.yaml", "loadgen"),
        ("ray::ServeReplica:thinktier:LoadBoard", "other"),
        ("/tmp/site/ray/core/src/ray/raylet/raylet --node_ip_address=127.0.0.1", "other"),
        ("python3 -m thinktier bench fullstack --config tiered=policies/examples/gpu-tiered.yaml", "other"),
    ],
)
def test_processes_are_classified_by_their_title(title: str, expected: str) -> None:
    assert classify(title) == expected


def test_cpu_percent_per_process_from_two_readings(tmp_path: Path) -> None:
    write_proc(tmp_path, 10, "python3", "ray::ServeReplica:thinktier:Ingress", utime=100, stime=20)
    write_proc(tmp_path, 11, "python3", "ray::ProxyActor", utime=50, stime=0)
    write_proc(tmp_path, 12, "python3", "ray::IDLE", utime=0, stime=0)
    write_proc(tmp_path, 13, "kworker/0:1", "", utime=0, stime=0)
    write_proc(tmp_path, 14, "python3", "short-lived", utime=0, stime=0)
    (tmp_path / "self").mkdir()
    before = read_processes(tmp_path, HZ)
    assert before[(13, 500)].title == "kworker/0:1"  # no command line: the kernel's name
    # 2 s later: Ingress used 5 s of CPU (250%), the proxy 2 s (100%), the idle worker became a tier replica and
    # used 1 s, pid 14 ended and a new process took its pid (another start time: not compared with the old one)
    write_proc(tmp_path, 10, "python3", "ray::ServeReplica:thinktier:Ingress", utime=500, stime=120)
    write_proc(tmp_path, 11, "python3", "ray::ProxyActor", utime=200, stime=50)
    write_proc(tmp_path, 12, "python3", "ray::ServeReplica:thinktier:tier-chat", utime=60, stime=40)
    write_proc(tmp_path, 14, "python3", "VLLM::EngineCore", utime=900, stime=0, start=700)
    after = read_processes(tmp_path, HZ)
    loads = process_loads(before, after, dt_s=2.0)
    assert [(p.pid, p.cpu_class, p.percent) for p in loads] == [
        (10, "ingress", 250.0), (11, "proxy", 100.0), (12, "tier", 50.0), (13, "other", 0.0)
    ]


def test_classes_sum_their_processes_and_keep_the_busiest() -> None:
    before = {(1, 0): ProcCPU(1, 0.0, "a"), (2, 0): ProcCPU(2, 0.0, "b"), (3, 0): ProcCPU(3, 0.0, "c")}
    after = {
        (1, 0): ProcCPU(1, 3.0, "ray::ServeReplica:thinktier:tier-reasoning"),
        (2, 0): ProcCPU(2, 1.0, "ray::ServeReplica:thinktier:tier-reasoning"),
        (3, 0): ProcCPU(3, 2.0, "VLLM::EngineCore"),
    }
    classes = by_class(process_loads(before, after, dt_s=2.0))
    assert classes == {
        "engine": ClassCPU(percent=100.0, busiest=100.0, processes=1),
        "tier": ClassCPU(percent=200.0, busiest=150.0, processes=2),
    }


def sample(t_s: float, dt_s: float, ingress: float | None, running: float = 0.0, busiest: float | None = None) -> Sample:
    cpu = {"other": ClassCPU(percent=10.0, busiest=10.0, processes=3)}
    if ingress is not None:
        cpu["ingress"] = ClassCPU(percent=ingress, busiest=busiest if busiest is not None else ingress, processes=1)
    return Sample(t_s=t_s, dt_s=dt_s, cpu=cpu, top=[], engine={"requests_running": {"reasoning/r1": running}}, gpu=[])


def test_cpu_means_are_time_weighted_and_a_missing_class_counts_as_idle() -> None:
    samples = [sample(2, 2, 100), sample(6, 4, 250, busiest=130), sample(8, 2, None)]
    stats = cpu_stats(samples)
    assert stats["ingress"] == CpuStat(mean=(100 * 2 + 250 * 4 + 0 * 2) / 8, max=250, busiest_max=130)
    assert stats["other"].mean == pytest.approx(10.0)


def test_the_load_window_starts_when_the_engines_first_have_work() -> None:
    samples = [sample(2, 2, 5), sample(4, 2, 5), sample(6, 2, 200, running=3), sample(8, 2, 300, running=9),
               sample(10, 2, 50, running=1), sample(12, 2, 20)]
    window = load_window(samples, duration_s=4)
    assert window == (4, 8)  # the interval 4-6 s saw the first request; of the intervals only 4-6 and 6-8 s are in
    assert cpu_stats(samples, window)["ingress"] == CpuStat(mean=250, max=300, busiest_max=300)
    assert load_window([sample(2, 2, 5)], duration_s=5) == (0, 5)


# ---- /metrics and requests ------------------------------------------------------------------------------


def test_engine_series_are_read_from_thinktier_metrics_page() -> None:
    stats = {
        "reasoning": {"r1": ReplicaStats(kv_occupancy=0.75, num_running=40, num_waiting=2, num_preemptions_total=9)},
        "chat": {"c1": ReplicaStats(kv_occupancy=0.01, num_running=1)},
    }
    page = generate_latest(ServiceMetrics(lambda: stats, dict).registry).decode()
    series = parse_series(page, THINKTIER_FINAL)
    assert series["kv_cache_occupancy_ratio"] == {"reasoning/r1": 0.75, "chat/c1": 0.01}
    assert series["requests_running"] == {"reasoning/r1": 40, "chat/c1": 1}
    assert series["requests_waiting"] == {"reasoning/r1": 2, "chat/c1": 0}
    assert series["preemptions_total"] == {"reasoning/r1": 9, "chat/c1": 0}


def test_the_peer_series_are_read_from_ray_metrics_page_by_model_and_worker() -> None:
    ray_labels = 'Component="core_worker",NodeAddress="10.0.0.1",SessionName="s1",engine="0",model_name="ray-llm"'
    page = "\n".join([
        "# TYPE ray_vllm_kv_cache_usage_perc gauge",
        f'ray_vllm_kv_cache_usage_perc{{{ray_labels},WorkerId="w1"}} 0.97',
        f'ray_vllm_kv_cache_usage_perc{{{ray_labels},WorkerId="w2"}} 0.5',
        "# TYPE ray_vllm_num_requests_waiting gauge",
        f'ray_vllm_num_requests_waiting{{{ray_labels},WorkerId="w1"}} 12',
        "# TYPE ray_vllm_num_preemptions counter",
        f'ray_vllm_num_preemptions_total{{{ray_labels},WorkerId="w1"}} 31',
        "# TYPE ray_vllm_prompt_tokens counter",
        f'ray_vllm_prompt_tokens_total{{{ray_labels},WorkerId="w1"}} 5000',
    ]) + "\n"
    assert parse_series(page, PEER_FINAL) == {
        "kv_cache_occupancy_ratio": {"ray-llm/w1": 0.97, "ray-llm/w2": 0.5},
        "requests_waiting": {"ray-llm/w1": 12},
        "preemptions_total": {"ray-llm/w1": 31},
    }


def result(index: int, klass: str, status: int | None, error: str | None = None, **times: float) -> RequestResult:
    r = RequestResult(index, klass, f"{klass}-{index}", start_s=index * 0.25, status=status, error=error,
                      decision={"tier": "reasoning"} if status else {})
    for name, value in times.items():
        setattr(r, name, value)
    return r


def test_outcomes_are_counted_from_requests_jsonl_as_the_report_counts_them() -> None:
    rows = [{"run": "rate=4", **asdict(r)} for r in (
        result(0, "easy", 200),
        result(1, "easy", None, "no complete response within 180 s (--request-timeout)"),
        result(2, "hard", None, "ConnectError: refused"),
        result(3, "hard", 429, "HTTP 429: busy"),
        result(4, "medium", 200, "RemoteProtocolError: peer closed"),
    )]
    assert failures(json.loads(json.dumps(rows))) == Failures(requests=5, errors=3, shed=1, no_response=2, timeouts=1)


def test_idle_probe_asks_the_chat_tier_or_the_auto_model_without_thinking() -> None:
    chat = Config("tiered", TIERED).idle_options(load_policy(TIERED)).body("hi")
    assert (chat["model"], chat["max_tokens"], chat["stream_options"]) == ("thinktier-chat", 256, {"include_usage": True})
    assert "max_thinking_tokens" not in chat
    auto = Config("onepool", ONEPOOL).idle_options(load_policy(ONEPOOL)).body("hi")
    assert {k: auto[k] for k in ("model", "max_tokens", "reasoning_effort", "max_thinking_tokens")} == {
        "model": "thinktier", "max_tokens": 256, "reasoning_effort": "low", "max_thinking_tokens": 0
    }
    peer = PEER.idle_options(load_policy(ONEPOOL)).body("hi")
    assert {k: peer.get(k) for k in ("model", "max_tokens", "thinking_token_budget", "reasoning_effort")} == {
        "model": "ray-llm", "max_tokens": 256, "thinking_token_budget": 0, "reasoning_effort": None
    }


def test_idle_summary_takes_medians_of_the_successful_replies() -> None:
    replies = [
        result(0, "chat", 200, ttft_s=0.05, e2e_s=2.0, completion_tokens=256),
        result(1, "chat", 200, ttft_s=0.07, e2e_s=2.6, completion_tokens=256),
        result(2, "chat", 200, ttft_s=0.04, e2e_s=2.2, completion_tokens=250),
        result(3, "chat", None, "ReadTimeout: timed out"),
    ]
    probe = idle_summary("thinktier-chat", replies)
    assert (probe.ttft_median_s, probe.e2e_median_s, probe.tokens_median) == (0.05, 2.2, 256)
    assert len(probe.replies) == 4 and probe.replies[0].tier == "reasoning"


def test_the_load_command_is_one_the_loadtest_cli_accepts(tmp_path: Path) -> None:
    load = LoadArgs(TIERED, 4.0, 0.5, 90.0, 1, "easy=0.5,medium=0.3,hard=0.1,chat=0.1", 180.0)
    command = loadtest_command("http://127.0.0.1:8000", load, tmp_path)
    assert command[1:5] == ["-m", "thinktier", "loadtest", "run"]
    args = build_parser().parse_args(command[3:])
    assert (args.url, Path(args.policy), args.rate, args.shape, args.duration, args.seed) == (
        "http://127.0.0.1:8000", TIERED, (4.0,), 0.5, 90.0, 1
    )
    assert (args.mix, args.request_timeout, args.no_progress, args.out) == (Mix.parse(load.mix), 180.0, True, tmp_path)
    assert (args.model, args.max_tokens, args.thinking_token_budget, args.exporter) == ("thinktier", None, None, "thinktier")


def test_the_peer_gets_the_pools_default_effort_budget_through_vllms_fields(tmp_path: Path) -> None:
    load = LoadArgs(TIERED, 4.0, 0.5, 90.0, 1, "easy=1", 180.0)
    url = "http://127.0.0.1:8000"
    args = build_parser().parse_args(loadtest_command(url, load, tmp_path, PEER.loadtest_args(load_policy(ONEPOOL), url))[3:])
    medium = load_policy(ONEPOOL).tiers["reasoning"].budgets["medium"]  # gpu-onepool.yaml: default_effort medium
    assert (args.model, args.max_tokens, args.thinking_token_budget) == (
        "ray-llm", medium.thinking_tokens + medium.answer_tokens, medium.thinking_tokens
    )
    assert (args.metrics_url, args.exporter) == ("http://127.0.0.1:8090/metrics", "ray-serve-llm")


def test_each_config_starts_its_own_server_command() -> None:
    up = build_parser().parse_args(Config("tiered", TIERED).start_command(8000, 300.0)[4:])
    assert (Path(up.policy), up.port, up.timeout) == (TIERED, 8000, 300.0)
    peer = build_parser().parse_args(PEER.start_command(8000, 300.0)[4:])
    assert (Path(peer.policy), peer.port, peer.metrics_port, peer.ready_timeout, peer.tier) == (ONEPOOL, 8000, 8090, 300.0, None)
    assert (Config("tiered", TIERED).ready_path(), PEER.ready_path()) == ("/readyz", "/v1/models")


# ---- summary from saved JSON ----------------------------------------------------------------------------

SLOS = {"easy": SLO(ttfvt_s=10, e2e_s=15), "medium": SLO(ttfvt_s=30, e2e_s=45), "hard": SLO(ttfvt_s=90, e2e_s=120)}


def canned_results() -> list[RequestResult]:
    return [
        result(0, "easy", 200, ttft_s=0.5, ttfvt_s=2.0, e2e_s=4.0, completion_tokens=600),
        result(1, "easy", 200, ttft_s=0.5, ttfvt_s=6.0, e2e_s=9.0, completion_tokens=600),
        result(2, "easy", None, "no complete response within 180 s (--request-timeout)"),
        result(3, "medium", 200, ttft_s=1.0, ttfvt_s=20.0, e2e_s=50.0, completion_tokens=2000),
        result(4, "hard", 200, ttft_s=1.0, ttfvt_s=60.0, e2e_s=100.0, completion_tokens=4000),
        result(5, "hard", 429, "HTTP 429: saturated"),
        result(6, "chat", 200, ttft_s=0.2, ttfvt_s=0.2, e2e_s=3.0, completion_tokens=256),
        result(7, "chat", 200, "RemoteProtocolError: peer closed", ttft_s=0.2),
    ]


def canned_report_json() -> str:
    """A report as `thinktier loadtest run` writes it (thinktier.loadtest.report), 8 requests over 20 s."""
    results = canned_results()
    timeline = MetricsTimeline(
        samples=[TierSample(1.0, "reasoning", 0.4, 0.5, 1, 0.0), TierSample(2.0, "reasoning", 0.9, 1.0, 1, 1.0),
                 TierSample(1.0, "chat", 0.01, 0.02, 1, 0.0)],
        scrapes=2,
    )
    record = RunRecord("rate=4", "open", 4.0, 0.5, 20.0, results, timeline)
    settings = {"rate": 4.0, "duration_s": 90.0, "seed": 1}
    return build_report("http://127.0.0.1:8000", settings, SLOS, [record]).model_dump_json(indent=2)  # type: ignore[arg-type]


def saved_run(name: str, started: float, **fields: object) -> ConfigRun:
    return ConfigRun(name=name, policy=f"policies/examples/gpu-{name}.yaml", started_unix=started, **fields)  # type: ignore[arg-type]


def test_fullstack_md_is_rebuilt_from_saved_json(tmp_path: Path) -> None:
    tiered = saved_run(
        "tiered", 200.0, up_s=171.0,
        idle=IdleProbe(model="thinktier-chat", replies=[], ttft_median_s=0.05, e2e_median_s=2.4, tokens_median=256),
        cpu_load={"ingress": CpuStat(mean=180.4, max=262.0, busiest_max=262.0),
                  "proxy": CpuStat(mean=95.2, max=110.0, busiest_max=110.0)},
        failures=Failures(requests=8, errors=2, shed=1, no_response=1, timeouts=1),
        timeline=[sample(2, 2, 100)],
    )
    onepool = saved_run("onepool", 900.0, up_s=300.0, error="thinktier up exited with 1")
    (tmp_path / "tiered-fullstack.json").write_text(tiered.model_dump_json())
    (tmp_path / "tiered-report.json").write_text(canned_report_json())
    (tmp_path / "onepool-fullstack.json").write_text(onepool.model_dump_json())

    text = write_summary(tmp_path)
    assert (tmp_path / "fullstack.md").read_text() == text
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| config | requests | ok | errors (no response) | easy TTFVT p50 / p99 s |")
    tiered_cells = [c.strip() for c in rows[1].strip("|").split("|")]
    assert tiered_cells == [
        "tiered", "8", "5", "2 (1)",
        "4.0 / 6.0", "20.0 / 20.0", "60.0 / 60.0", "0.2 / 0.2",  # TTFVT of the successful requests
        "0.20",  # goodput: both easy, hard and chat met their SLO, medium missed its 45 s E2E -> 4 / 20 s
        "373",  # output tokens: (600 + 600 + 2000 + 4000 + 256) / 20 s
        "180 / 262", "95 / 110", "2.40", "chat 0.02, reasoning 1.00",
    ]
    assert rows[2].split("|")[1].strip() == "onepool" and rows[2].count(" - ") >= 10
    assert "- onepool: thinktier up exited with 1" in text


def test_summary_line_names_the_figures_or_why_there_are_none() -> None:
    row = summary_row(saved_run("tiered", 1.0, failures=Failures(requests=8, errors=2, shed=1, no_response=0, timeouts=0)),
                      Report.model_validate_json(canned_report_json()))
    line = summary_line(row)
    assert line.startswith("SUMMARY tiered: requests 8 ok 5 errors 2 (no response 0) | TTFVT p50/p99 s easy 4.0 / 6.0 ")
    assert "goodput 0.20 req/s | output 373 tok/s | CPU % mean/max Ingress - proxy -" in line
    assert summary_line(summary_row(saved_run("x", 1.0, error="not ready after 300 s"), None)) == (
        "SUMMARY x: no load report (not ready after 300 s)"
    )


def test_a_policy_is_started_only_with_time_for_start_up_arrivals_and_stop() -> None:
    load = LoadArgs(TIERED, 4.0, 0.5, 90.0, 1, "easy=1", 180.0)
    assert MIN_CONFIG_S == 240
    assert min_left_s(load) == 330  # so two such policies never share a 570 s call


# ---- the command ----------------------------------------------------------------------------------------


def fullstack_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="thinktier bench")
    add_fullstack(parser.add_subparsers())
    return parser


def test_the_device_invocation_parses() -> None:
    args = fullstack_parser().parse_args(shlex.split(
        "fullstack --config tiered=policies/examples/gpu-tiered.yaml --peer ray=policies/examples/gpu-onepool.yaml "
        "--config onepool=policies/examples/gpu-onepool.yaml "
        "--slo-policy policies/examples/gpu-tiered.yaml --rate 4 --shape 0.5 --duration 90 --seed 1 "
        "--mix easy=0.5,medium=0.3,hard=0.1,chat=0.1 --request-timeout 180 --out /tmp/out --deadline 570"
    ))
    assert [(c.name, c.kind) for c in args.config] == [
        ("tiered", "thinktier"), ("ray", "ray-serve-llm"), ("onepool", "thinktier")
    ]
    assert all(c.policy.is_absolute() for c in args.config)
    assert (args.rate, args.shape, args.duration, args.seed, args.request_timeout, args.deadline) == (4, 0.5, 90, 1, 180, 570)
    with pytest.raises(SystemExit):
        fullstack_parser().parse_args(["fullstack", "--config", "no-equals-sign"])


def test_summarize_mode_writes_fullstack_md(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tiered-fullstack.json").write_text(saved_run("tiered", 1.0).model_dump_json())
    (tmp_path / "tiered-report.json").write_text(canned_report_json())
    args = fullstack_parser().parse_args(["fullstack", "--summarize", str(tmp_path)])
    assert args.func(args) == 0
    assert "| tiered | 8 | 5 |" in capsys.readouterr().out
    assert (tmp_path / "fullstack.md").exists()


def test_summarize_with_a_baseline_compares_the_configs_from_their_saved_requests(tmp_path: Path) -> None:
    for started, name in enumerate(("tiered", "onepool")):
        (tmp_path / f"{name}-fullstack.json").write_text(saved_run(name, float(started)).model_dump_json())
        (tmp_path / f"{name}-report.json").write_text(canned_report_json())
        results = canned_results() if name == "tiered" else [r for r in canned_results() if r.request_class != "easy"]
        rows = [json.dumps({"run": "rate=4", **asdict(r)}) for r in results]
        (tmp_path / f"{name}-requests.jsonl").write_text("\n".join(rows) + "\n")
    args = fullstack_parser().parse_args(["fullstack", "--summarize", str(tmp_path), "--baseline", "onepool"])
    assert args.func(args) == 0
    compare = (tmp_path / "compare.md").read_text()
    assert "| easy goodput req/s | higher | 0.1 | - |" in compare  # rebuilt: onepool has no easy request
    assert "| hard goodput req/s | higher | 0.05 (1.00x) | 0.05 (1.00x) |" in compare
    assert "| requests |" not in compare and json.loads((tmp_path / "compare.json").read_text())["baseline"] == "onepool"
    assert Report.model_validate_json((tmp_path / "onepool-report.json").read_text()).runs[0].overall.requests == 5
    for png in ("ttfvt_p99_by_class", "tiered-kv", "tiered-latency", "onepool-kv", "onepool-latency"):
        assert (tmp_path / f"{png}.png").stat().st_size > 1000
    missing = fullstack_parser().parse_args(["fullstack", "--summarize", str(tmp_path), "--baseline", "nope"])
    assert missing.func(missing) == 2


def test_a_peer_is_ready_only_once_it_says_so(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), OkHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/models"
    say = "import time; print('engines starting', flush=True); time.sleep(1.5); print('{}', flush=True); time.sleep(30)"
    try:
        serving = ServerProcess([sys.executable, "-c", say.format(PEER_READY_LINE + " x")], tmp_path / "a.log")
        started = time.monotonic()
        assert serving.wait_ready(url, 20, PEER_READY_LINE) is None
        assert time.monotonic() - started >= 1.5  # the ingress answered all along; the line came later
        serving.stop(5, Clock(60))
        silent = ServerProcess([sys.executable, "-c", "print('engines starting')"], tmp_path / "b.log")
        assert silent.wait_ready(url, 20, PEER_READY_LINE) == "the server exited with 0"
    finally:
        server.shutdown()


class OkHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_run_without_configs_or_with_a_repeated_name_starts_nothing(tmp_path: Path) -> None:
    parser = fullstack_parser()
    for argv in (["--out", str(tmp_path)], ["--config", f"a={TIERED}", "--config", f"a={ONEPOOL}", "--out", str(tmp_path)]):
        args = parser.parse_args(["fullstack", *argv])
        assert args.func(args) == 2
    assert list(tmp_path.iterdir()) == []
