"""The load tester: arrival statistics, the client's timing of a real SSE stream, the report, and a short
real run against a running thinktier."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.conftest import TINY_POLICY
from thinktier.cli import loadtest as cli_loadtest
from thinktier.cluster.local import LocalCluster
from thinktier.deployments.tier.engine import engine_kwargs
from thinktier.loadtest.client import RequestOptions, RequestResult
from thinktier.loadtest.compare_report import markdown as compare_markdown
from thinktier.loadtest.compare_report import side_by_side
from thinktier.loadtest.measure import LoadSpec, measure
from thinktier.loadtest.metrics_scraper import THINKTIER_METRICS, MetricsTimeline, parse_tiers
from thinktier.loadtest.ray_llm_target import THINKTIER_ONLY_ENGINE_ARGS, settings_from_tier
from thinktier.loadtest.report import build_report, class_stats
from thinktier.loadtest.report import markdown as report_markdown
from thinktier.loadtest.runner import RunRecord, RunSettings, Target, run_closed_loop
from thinktier.loadtest.workload import (
    ExactReply,
    Mix,
    Prompt,
    PromptPool,
    WorkItem,
    arrival_times,
    classifier_held_out,
    closed_loop,
    gamma_interarrivals,
    open_loop,
)
from thinktier.policies.loader import load_policy
from thinktier.policies.schema import SLO, Replicas

# ---- arrivals and mix ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [0.25, 0.5, 1.0, 2.0])
def test_gamma_arrivals_have_the_asked_mean_rate_and_burstiness(shape: float) -> None:
    rate = 4.0
    gaps = gamma_interarrivals(np.random.default_rng(7), rate, shape, 40_000)
    assert 1 / gaps.mean() == pytest.approx(rate, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(shape), rel=0.05)


def test_arrivals_cover_the_duration_at_the_rate() -> None:
    times = arrival_times(np.random.default_rng(1), rate=5.0, shape=0.5, duration_s=2000.0)
    assert times[0] == 0.0
    assert np.all(np.diff(times) >= 0)
    assert times[-1] < 2000.0
    assert len(times) / 2000.0 == pytest.approx(5.0, rel=0.05)


def _pool() -> PromptPool:
    prompts = {"easy": ["2+2?", "3+5?"], "medium": ["integrate x^2"], "hard": ["prove Fermat"]}
    pool = PromptPool([], ["hello there", "how are you"])
    for cls, texts in prompts.items():
        pool.by_class[cls] = [Prompt(f"{cls}-{i}", t, cls, "test") for i, t in enumerate(texts)]  # type: ignore[index]
    return pool


def test_workload_is_reproducible_and_follows_the_mix() -> None:
    mix = Mix.parse("easy=5,medium=3,hard=1,chat=1")
    assert mix.shares == pytest.approx({"easy": 0.5, "medium": 0.3, "hard": 0.1, "chat": 0.1})
    first = open_loop(_pool(), mix, rate=50.0, shape=0.5, duration_s=200.0, seed=3)
    again = open_loop(_pool(), mix, rate=50.0, shape=0.5, duration_s=200.0, seed=3)
    other = open_loop(_pool(), mix, rate=50.0, shape=0.5, duration_s=200.0, seed=4)
    assert first == again
    assert first != other
    counts = {c: sum(i.prompt.request_class == c for i in first) / len(first) for c in mix.shares}
    assert counts == pytest.approx(mix.shares, abs=0.02)


def test_closed_loop_batches_have_the_asked_size() -> None:
    batches = closed_loop(_pool(), Mix.parse("easy=1,hard=1"), batch_size=4, batches=3, seed=0)
    assert [len(b) for b in batches] == [4, 4, 4]
    assert [item.batch for b in batches for item in b] == [0] * 4 + [1] * 4 + [2] * 4
    assert {item.prompt.request_class for b in batches for item in b} <= {"easy", "hard"}


def test_mix_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="CLASS=WEIGHT"):
        Mix.parse("easy=1,impossible=2")
    with pytest.raises(ValueError, match="no class a positive weight"):
        Mix.parse("easy=0")
    pool = PromptPool([], [])
    with pytest.raises(ValueError, match=r"no prompts of that class"):
        pool.draw(np.random.default_rng(0), Mix.parse("chat=1"), 1)


def test_builtin_pool_has_every_class() -> None:
    pool = PromptPool.builtin(["en"])
    assert all(pool.by_class[c] for c in ("easy", "medium", "hard", "chat"))


def test_default_load_sends_only_prompts_the_default_classifier_never_trained_on() -> None:
    held_out = classifier_held_out()
    default = cli_loadtest.pool_of(_parsed_run())
    everything = cli_loadtest.pool_of(_parsed_run("--prompts", "problem-sets"))
    for request_class in ("easy", "medium", "hard", "chat"):
        ids = {p.id for p in default.by_class[request_class]}
        assert ids and ids <= held_out
        assert len(ids) < len({p.id for p in everything.by_class[request_class]})
    drawn = default.draw(np.random.default_rng(0), Mix.parse("easy=1,medium=1,hard=1,chat=1"), 200)
    assert {p.id for p in drawn} <= held_out


def _parsed_run(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli_loadtest.register(parser.add_subparsers())
    return parser.parse_args(["loadtest", "run", "--url", "http://127.0.0.1:1", *argv])


# ---- the client against a real SSE server -------------------------------------------------------

THINK_DELAY_S = 0.3
ANSWER_DELAY_S = 0.5
REASONING_TOKENS = 5
ANSWER_TOKENS = 3


def _chunk(delta: dict[str, str]) -> str:
    return "data: " + json.dumps({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}) + "\n\n"


async def _stream(field: str, think_delay_s: float, details: bool = True) -> AsyncIterator[str]:
    yield _chunk({"role": "assistant", "content": ""})
    await asyncio.sleep(think_delay_s)
    for i in range(REASONING_TOKENS):
        yield _chunk({field: f"step {i} "})
    await asyncio.sleep(ANSWER_DELAY_S)
    for i in range(ANSWER_TOKENS):
        yield _chunk({"content": f"answer {i} "})
    usage = {
        "prompt_tokens": 7,
        "completion_tokens": REASONING_TOKENS + ANSWER_TOKENS,
        **({"completion_tokens_details": {"reasoning_tokens": REASONING_TOKENS}} if details else {}),
    }
    yield "data: " + json.dumps({"choices": [], "usage": usage}) + "\n\n"
    yield "data: [DONE]\n\n"


async def _completions(request: Request) -> Response:
    body = await request.json()
    prompt = body["messages"][-1]["content"]
    if prompt == "shed me":
        return JSONResponse(
            {"error": {"message": "saturated", "type": "rate_limit"}}, status_code=429, headers={"Retry-After": "5"}
        )
    field = "reasoning_content" if prompt == "old field" else "reasoning"
    think_delay = 3 * THINK_DELAY_S if prompt == "slow" else THINK_DELAY_S
    headers = {"x-thinktier-tier": "reasoning", "x-thinktier-effort": "medium", "x-thinktier-degraded": "budget"}
    stream = _stream(field, think_delay, details=prompt != "no details")
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


async def _metrics(request: Request) -> Response:
    return PlainTextResponse(
        "# TYPE thinktier_kv_cache_occupancy_ratio gauge\n"
        'thinktier_kv_cache_occupancy_ratio{tier="reasoning",replica="a"} 0.25\n'
        'thinktier_kv_cache_occupancy_ratio{tier="reasoning",replica="b"} 0.75\n'
        "# TYPE thinktier_stragglers gauge\n"
        'thinktier_stragglers{tier="reasoning"} 2\n'
    )


@pytest.fixture(scope="module")
def sse_url() -> Iterator[str]:
    """A real HTTP server (uvicorn) that streams thinking deltas, waits, then answer deltas."""
    app = Starlette(routes=[Route("/v1/chat/completions", _completions, methods=["POST"]), Route("/metrics", _metrics)])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=10)


def _items(*texts: str) -> list[WorkItem]:
    return [WorkItem(i, Prompt(f"p{i}", t, "hard", "test"), batch=0) for i, t in enumerate(texts)]


@pytest.mark.parametrize("prompt", ["new field", "old field"])
def test_ttfvt_is_the_first_answer_delta_not_the_first_thinking_delta(sse_url: str, prompt: str) -> None:
    record = asyncio.run(run_closed_loop(Target(sse_url), [_items(prompt)], RunSettings(progress=False), "one"))
    result = record.results[0]
    assert result.ok, result.error
    assert THINK_DELAY_S <= result.ttft_s < THINK_DELAY_S + 0.25  # type: ignore[operator]
    assert result.ttfvt_s >= THINK_DELAY_S + ANSWER_DELAY_S  # type: ignore[operator]
    assert result.ttfvt_s - result.ttft_s >= ANSWER_DELAY_S - 0.05  # type: ignore[operator]
    assert result.e2e_s >= result.ttfvt_s  # type: ignore[operator]
    assert (result.reasoning_tokens, result.answer_tokens) == (REASONING_TOKENS, ANSWER_TOKENS)
    assert result.decision["tier"] == "reasoning"
    assert result.degraded


def test_thinking_is_counted_from_the_stream_when_usage_has_no_reasoning_tokens(sse_url: str) -> None:
    record = asyncio.run(run_closed_loop(Target(sse_url), [_items("no details")], RunSettings(progress=False), "one"))
    result = record.results[0]
    assert (result.reasoning_tokens, result.answer_tokens) == (REASONING_TOKENS, ANSWER_TOKENS)


def test_an_unknown_thinking_split_leaves_answer_tokens_unknown_not_all_answer() -> None:
    thought = RequestResult(0, "hard", "p0", 0.0, status=200, ttft_s=0.1, ttfvt_s=2.0, e2e_s=3.0, completion_tokens=800)
    plain = RequestResult(1, "chat", "p1", 0.0, status=200, ttft_s=0.1, ttfvt_s=0.1, e2e_s=1.0, completion_tokens=50)
    assert (thought.answer_tokens, plain.answer_tokens) == (None, 50)
    timeline = MetricsTimeline()
    slos = {"easy": SLO(ttfvt_s=10, e2e_s=15), "medium": SLO(ttfvt_s=30, e2e_s=45), "hard": SLO(ttfvt_s=90, e2e_s=120)}
    unknown = build_report("u", {}, slos, [RunRecord("r", "open", 1.0, 0.5, 10.0, [thought], timeline)])  # type: ignore[arg-type]
    assert unknown.runs[0].answer_tps is None and "answer only -" in report_markdown(unknown)
    known = build_report("u", {}, slos, [RunRecord("r", "open", 1.0, 0.5, 10.0, [thought, plain], timeline)])  # type: ignore[arg-type]
    assert known.runs[0].answer_tps == 5.0  # the plain reply's 50 tokens over 10 s


def test_every_answer_that_comes_back_is_checked_against_its_prompt(sse_url: str) -> None:
    streamed = "".join(f"answer {i} " for i in range(ANSWER_TOKENS))
    prompts = [
        Prompt("right", "fast", "chat", "test", ExactReply(streamed)),
        Prompt("wrong", "fast", "chat", "test", ExactReply("answer 0")),
        Prompt("refused", "shed me", "chat", "test", ExactReply(streamed)),
        Prompt("unchecked", "fast", "chat", "test"),
    ]
    items = [WorkItem(i, p, batch=0) for i, p in enumerate(prompts)]
    record = asyncio.run(run_closed_loop(Target(sse_url), [items], RunSettings(progress=False), "checked"))
    assert [r.correct for r in record.results] == [True, False, False, None]


def test_a_429_counts_as_shed_with_its_retry_after(sse_url: str) -> None:
    record = asyncio.run(run_closed_loop(Target(sse_url), [_items("shed me")], RunSettings(progress=False), "shed"))
    result = record.results[0]
    assert (result.ok, result.shed, result.retry_after_s) == (False, True, 5.0)
    assert "saturated" in (result.error or "")


def test_closed_loop_report_shows_the_straggler_and_the_scraped_tiers(sse_url: str, tmp_path: Path) -> None:
    record = asyncio.run(
        run_closed_loop(
            Target(sse_url), [_items("fast", "fast", "fast", "slow")], RunSettings(progress=False, scrape_interval_s=0.2), "b"
        )
    )
    from thinktier.loadtest.report import run_report

    report = run_report(record, load_policy().slos)
    (batch,) = report.batches
    assert batch.straggler_ratio is not None and batch.straggler_ratio > 1.3  # the slow request holds the batch
    (tier,) = report.tiers
    assert (tier.tier, tier.kv_occupancy_mean, tier.kv_occupancy_max, tier.stragglers_max) == ("reasoning", 0.5, 0.75, 2.0)
    assert report.overall.degraded == 4


# ---- report ------------------------------------------------------------------------------------------


def _result(cls: str, ttfvt: float | None, e2e: float | None, status: int = 200) -> RequestResult:
    return RequestResult(0, cls, "x", 0.0, status=status, ttft_s=ttfvt, ttfvt_s=ttfvt, e2e_s=e2e, completion_tokens=10)


def test_goodput_counts_only_requests_within_their_class_slo() -> None:
    slos = {"easy": SLO(ttfvt_s=1, e2e_s=5), "medium": SLO(ttfvt_s=10, e2e_s=50), "hard": SLO(ttfvt_s=60, e2e_s=100)}
    results = [
        _result("easy", 0.5, 4.0),  # met
        _result("easy", 2.0, 4.0),  # TTFVT too slow for easy
        _result("chat", 3.0, 4.0),  # chat is held to easy: missed
        _result("medium", 3.0, 40.0),  # met
        _result("hard", None, 30.0),  # no answer token: missed
        _result("hard", None, None, status=429),  # shed
    ]
    stats = class_stats(results, slos, window_s=2.0)
    assert (stats.slo_met, stats.goodput_rps, stats.shed, stats.errors, stats.no_answer) == (2, 1.0, 1, 0, 1)
    assert stats.slo_attainment == pytest.approx(2 / 6)


def test_goodput_is_per_second_of_the_arrival_window_so_a_longer_drain_costs_no_goodput() -> None:
    from thinktier.loadtest.report import run_report

    slos = load_policy().slos  # easy: TTFVT <= 2 s
    results = [_result("easy", 0.5, 1.0) for _ in range(10)]
    quick = run_report(RunRecord("r", "open", 1.0, 1.0, 12.0, results, MetricsTimeline(), window_s=10.0), slos)
    drained = run_report(RunRecord("r", "open", 1.0, 1.0, 30.0, results, MetricsTimeline(), window_s=10.0), slos)
    assert quick.goodput_rps == drained.goodput_rps == pytest.approx(1.0)  # 10 met over the 10 s of arrivals
    assert drained.tps == pytest.approx(quick.tps * 12 / 30)  # throughput stays per second of the whole run
    closed = run_report(RunRecord("b", "closed", None, None, 20.0, results, MetricsTimeline()), slos)
    assert closed.window_s == 20.0 and closed.goodput_rps == pytest.approx(0.5)  # a closed loop's window is its run


def test_undegraded_goodput_leaves_out_requests_served_with_less_than_asked() -> None:
    slos = load_policy().slos
    served_as_asked = _result("easy", 0.5, 1.0)
    cut = _result("easy", 0.5, 1.0)
    cut.decision = {"degraded": "budget"}
    stats = class_stats([served_as_asked, cut], slos, window_s=1.0)
    assert (stats.goodput_rps, stats.undegraded_slo_met, stats.undegraded_goodput_rps) == (2.0, 1, 1.0)
    report = build_report("t", {}, slos, [RunRecord("r", "open", 1.0, 1.0, 1.0, [served_as_asked, cut],
                                                    MetricsTimeline(), window_s=1.0)])
    assert report.runs[0].undegraded_goodput_rps == 1.0
    assert "| 20.0 | 2.00 | 1.00 | - |" in report_markdown(report)  # TPS, goodput, undegraded goodput, correct goodput


def test_metrics_parser_groups_replicas_by_tier() -> None:
    text = (
        'thinktier_kv_cache_occupancy_ratio{tier="chat",replica="1"} 0.1\n'
        'thinktier_kv_cache_occupancy_ratio{tier="reasoning",replica="1"} 0.9\n'
        'thinktier_kv_cache_occupancy_ratio{tier="reasoning",replica="2"} 0.5\n'
        'thinktier_stragglers{tier="reasoning"} 3\n'
    )
    samples = {s.tier: s for s in parse_tiers(text, THINKTIER_METRICS, t_s=1.0)}
    assert samples["reasoning"].kv_occupancy_mean == pytest.approx(0.7)
    assert (samples["reasoning"].replicas, samples["reasoning"].stragglers) == (2, 3.0)
    assert (samples["chat"].kv_occupancy_max, samples["chat"].stragglers) == (0.1, None)


# ---- a short real run --------------------------------------------------------------------------------


@pytest.mark.integration
def test_report_from_a_short_real_run(serving_url: str, serving_cluster: LocalCluster, tmp_path: Path) -> None:
    """~20 s of Poisson load with every class against a real thinktier; the report must show it."""
    spec = LoadSpec(mix=Mix.parse("easy=0.4,medium=0.2,hard=0.2,chat=0.2"), rates=(0.5,), duration_s=20.0, seed=11)
    pool = PromptPool.builtin(["en"], max_chars=350)  # the tiny tokenizer makes ~0.65 tokens a character; the limit is 256
    report, paths = measure(
        Target(serving_url, options=RequestOptions(model="thinktier")),
        spec,
        pool,
        serving_cluster.policy.slos,
        tmp_path,
        RunSettings(progress=False, request_timeout_s=120),
    )
    (run,) = report.runs
    sent = len(open_loop(pool, spec.mix, 0.5, 1.0, 20.0, 11))
    assert run.overall.requests == sent
    failed = [line for line in (tmp_path / "requests.jsonl").read_text().splitlines() if '"error": null' not in line]
    assert run.overall.ok + run.overall.shed == sent, failed
    assert run.overall.e2e_s.count == run.overall.ok
    assert run.overall.ttfvt_s.p50 is not None and run.tps > 0
    assert sum(c.requests for c in run.classes.values()) == sent
    assert run.overall.tiers, "no x-thinktier-tier headers seen"
    assert run.tiers, f"no tier metrics scraped from /metrics: {run.scrape_last_error}"
    assert {p.name for p in paths} >= {"report.json", "report.md", "requests.jsonl", "goodput_vs_load.png"}
    assert "## rate=0.5" in (tmp_path / "report.md").read_text()
    assert all(p.stat().st_size > 0 for p in paths)


# ---- compare -----------------------------------------------------------------------------------------


def _record(ttfvt_s: float, count: int) -> RunRecord:
    results = [
        RequestResult(
            i, "easy", "x", float(i), status=200, ttft_s=ttfvt_s, ttfvt_s=ttfvt_s, e2e_s=ttfvt_s + 1, completion_tokens=10
        )
        for i in range(count)
    ]
    return RunRecord("rate=1", "open", 1.0, 1.0, 10.0, results, MetricsTimeline())


def test_compare_puts_targets_side_by_side_as_ratios_to_the_baseline() -> None:
    slos = load_policy().slos  # easy: TTFVT <= 2 s
    reports = {
        "fast": build_report("a", {}, slos, [_record(ttfvt_s=0.5, count=10)]),
        "slow": build_report("b", {}, slos, [_record(ttfvt_s=4.0, count=5)]),
    }
    rows = {row.metric: row for row in side_by_side(reports, "fast", {}).rows}
    assert rows["TTFVT p50 s"].ratios == {"fast": 1.0, "slow": pytest.approx(8.0)}
    assert rows["TPS (tokens/s)"].ratios["slow"] == pytest.approx(0.5)
    assert rows["goodput req/s"].values == {"fast": 1.0, "slow": 0.0}
    assert rows["hard TTFVT p99 s"].values == {"fast": None, "slow": None}
    assert "| TTFVT p50 s | lower | 0.5 (1.00x) | 4 (8.00x) |" in compare_markdown(side_by_side(reports, "fast", {}))


def test_ray_serve_llm_gets_the_tier_engine_and_the_thinking_opened_prompt() -> None:
    from jinja2 import Template

    tier = load_policy(TINY_POLICY).tiers["reasoning"]
    settings = settings_from_tier(tier)
    thinktier_kwargs = engine_kwargs(tier, settings.model_path)
    assert {k: v for k, v in settings.engine_kwargs.items() if k in thinktier_kwargs} == {
        k: v for k, v in thinktier_kwargs.items() if k not in THINKTIER_ONLY_ENGINE_ARGS
    }
    assert settings.env["VLLM_CPU_OMP_THREADS_BIND"] == tier.engine.cpu_threads
    prompt = Template(settings.engine_kwargs["chat_template"]).render(
        messages=[{"role": "user", "content": "2+2?"}], add_generation_prompt=True
    )
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")
    assert settings.engine_kwargs["reasoning_parser"] == "deepseek_r1"


def test_ray_serve_llm_gets_the_tier_replicas_and_its_prefix_aware_router() -> None:
    from thinktier.loadtest.ray_llm_target import llm_config, replica_scaling

    tier = load_policy(TINY_POLICY).tiers["reasoning"]
    two = tier.model_copy(update={"replicas": Replicas(min=2, max=2)})
    assert llm_config(settings_from_tier(two))["deployment_config"] == {
        "num_replicas": 2,
        "request_router_config": {"request_router_class": "ray.serve.llm.request_router.PrefixCacheAffinityRouter"},
    }
    scaled = tier.model_copy(update={"replicas": Replicas(min=1, max=4)})
    assert replica_scaling(scaled) == {"autoscaling_config": {"min_replicas": 1, "max_replicas": 4, "initial_replicas": None}}


def test_the_peer_spends_the_default_effort_budget_through_vllms_own_fields() -> None:
    from thinktier.loadtest.ray_llm_target import peer_options

    policy = load_policy(TINY_POLICY.with_name("gpu-onepool.yaml"))
    body = peer_options(policy, "reasoning", "ray-llm").body("2+2?")
    assert {k: body.get(k) for k in ("model", "max_tokens", "thinking_token_budget", "max_thinking_tokens")} == {
        "model": "ray-llm", "max_tokens": 1536 + 512, "thinking_token_budget": 1536, "max_thinking_tokens": None
    }
