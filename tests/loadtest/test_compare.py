"""The comparison matrix: targets that each isolate one mechanism, the peer's per-class budgets, repeated seeds, and a
report rebuilt from the raw requests."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from thinktier.deployments.request.decision import RoutingRequest
from thinktier.deployments.request.routing import Overloaded, TierLoad, decide
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.loadtest.client import RequestOptions, RequestResult
from thinktier.loadtest.compare import load_specs
from thinktier.loadtest.compare_report import matrix, summarize
from thinktier.loadtest.compare_targets import LINEUP, lineup
from thinktier.loadtest.measure import LoadSpec
from thinktier.loadtest.metrics_scraper import MetricsTimeline
from thinktier.loadtest.peer_budgets import per_class_options
from thinktier.loadtest.report import build_report, write
from thinktier.loadtest.runner import RunRecord
from thinktier.loadtest.workload import Mix, Prompt
from thinktier.policies.loader import load_policy, with_setting

EXAMPLES = Path(__file__).resolve().parents[2] / "policies" / "examples"
TIERED = load_policy(EXAMPLES / "compare-tiered.yaml")
POOL = load_policy(EXAMPLES / "compare-single-pool.yaml")
SATURATED = TierLoad((ReplicaStats(kv_occupancy=0.99, num_waiting=500),))
"""Past every saturation threshold the shipped policies use; short of a completely full KV cache."""


def test_the_lineup_isolates_budgets_the_split_lending_and_degradation(tmp_path: Path) -> None:
    lending = with_setting(TIERED, "lending", '[{"lender": "chat", "borrower": "reasoning"}]')
    targets = {t.name: t for t in lineup(lending, POOL, tmp_path)}
    assert tuple(targets) == LINEUP
    served = {name: load_policy(t.policy_path) for name, t in targets.items()}
    budgets = served["one-pool-budgets"]
    tier = budgets.tiers["reasoning"]
    assert list(budgets.tiers) == ["reasoning"] and budgets.routing.chat_tier is None
    assert tier.engine.kv_cache_memory_gib == POOL.tiers["reasoning"].engine.kv_cache_memory_gib  # the pool's resources
    assert tier.engine.cpu_threads == POOL.tiers["reasoning"].engine.cpu_threads
    assert tier.budgets == TIERED.tiers["reasoning"].budgets  # the tiered budgets and classifier
    assert budgets.routing.classifier == TIERED.routing.classifier
    assert tier.engine.scheduling_policy == "priority"
    hard = RoutingRequest(prompt="p", reasoning_effort="high")
    for name in ("one-pool", "one-pool-budgets", "tiered-no-degradation", "tiered-lending"):  # it waits, budget whole
        loads = {t: SATURATED for t in served[name].tiers}
        decision = decide(served[name], hard, None, loads)
        high = served[name].tiers["reasoning"].budgets["high"]
        assert decision.degraded is None and decision.thinking_tokens == high.thinking_tokens
    idle_chat = {"reasoning": SATURATED, "chat": TierLoad((ReplicaStats(kv_occupancy=0.1),))}
    assert decide(served["tiered-no-degradation"], hard, None, idle_chat).tier == "reasoning"  # the split alone
    assert decide(served["tiered-lending"], hard, None, idle_chat).home == "reasoning"  # lent by the chat tier
    assert not served["one-pool-budgets"].lending
    no_lending = {t.name for t in lineup(TIERED, POOL, tmp_path / "plain")}
    assert no_lending == set(LINEUP) - {"tiered-lending"}
    assert decide(served["tiered"], hard, None, {"reasoning": SATURATED}).degraded == "budget:low"
    with pytest.raises(Overloaded):
        decide(served["tiered"], RoutingRequest(prompt="p", reasoning_effort="low"), None,
               {"reasoning": SATURATED, "chat": SATURATED})
    peer = targets["ray-serve-llm"]
    assert peer.kind == "ray-serve-llm" and load_policy(peer.policy_path) == POOL
    assert peer.budgets_policy is not None and load_policy(peer.budgets_policy) == lending
    chosen = lineup(lending, POOL, tmp_path / "part", chosen=("one-pool", "tiered-lending"))
    assert [t.name for t in chosen] == ["one-pool", "tiered-lending"]
    assert sorted(p.name for p in (tmp_path / "part").iterdir()) == ["one-pool", "tiered-lending"]  # no stray folders


def test_the_peer_gets_the_budget_the_tiered_policy_gives_each_prompt() -> None:
    chat = Prompt("c", "Hello! How are you today?", "chat", "chat")
    olympiad = Prompt("h", "Find the number of ordered pairs $(m,n)$ of positive integers such that "
                      "$m^2n = 20^{20}$. Prove that your count is correct.", "hard", "aime")
    options = per_class_options(TIERED, [chat, olympiad, chat], RequestOptions(model="ray-llm", temperature=0.6))
    assert set(options) == {"c", "h"}
    chat_budget = TIERED.tiers["chat"].budgets["low"]
    assert (options["c"].thinking_token_budget, options["c"].max_tokens) == (0, chat_budget.answer_tokens)
    hard = options["h"]
    assert hard.thinking_token_budget is not None and hard.thinking_token_budget > 0
    assert hard.max_tokens == hard.thinking_token_budget + next(
        b.answer_tokens for b in TIERED.tiers["reasoning"].budgets.values() if b.thinking_tokens == hard.thinking_token_budget
    )
    assert (hard.model, hard.temperature) == ("ray-llm", 0.6)
    unscored = per_class_options(POOL, [olympiad], RequestOptions())["h"]  # no classifier: the default effort's budget
    assert unscored.thinking_token_budget == POOL.tiers["reasoning"].budgets[POOL.routing.default_effort].thinking_tokens


def test_repeated_seeds_run_at_the_middle_rate_after_the_first_seeds_sweep() -> None:
    spec = LoadSpec(Mix.parse("easy=1"), rates=(4.0, 1.0, 2.0), seed=7)
    specs = load_specs(spec, (7, 8, 9))
    assert [(s.rates, s.seed) for s in specs] == [((4.0, 1.0, 2.0), 7), ((2.0,), 8), ((2.0,), 9)]


def _record(label: str, ttfvt_s: float, ok: int, requests: int = 10) -> RunRecord:
    results = [
        RequestResult(i, "easy", f"p{i}", float(i), status=200 if i < ok else 500, ttft_s=ttfvt_s, ttfvt_s=ttfvt_s,
                      e2e_s=ttfvt_s + 1, completion_tokens=10)
        for i in range(requests)
    ]
    return RunRecord(label, "open", 1.0, 1.0, 12.0, results, MetricsTimeline(), window_s=10.0)


SLOS = load_policy().slos  # easy: TTFVT <= 2 s


def test_ratios_are_taken_within_a_seed_and_spread_over_seeds() -> None:
    # goodput: base 1.0, 0.8, 0.5 req/s over three seeds; the other target 0.5, 0.8, 1.0: ratios 0.5, 1.0, 2.0.
    by_seed = {
        seed: {"base": build_report("a", {}, SLOS, [_record("rate=1", 0.5, ok=b)]),
               "other": build_report("b", {}, SLOS, [_record("rate=1", 0.5, ok=o)])}
        for seed, (b, o) in enumerate([(10, 5), (8, 8), (5, 10)])
    }
    report = matrix(by_seed, ["base", "other"], "base", {})
    goodput = next(s for s in report.spread if s.metric == "goodput req/s")
    assert goodput.seeds == [0, 1, 2]
    ratios = goodput.ratios["other"]
    assert ratios is not None and (ratios.median, ratios.low, ratios.high) == pytest.approx((1.0, 0.5, 2.0))
    values = goodput.values["other"]
    assert values is not None and (values.median, values.low, values.high) == pytest.approx((0.8, 0.5, 1.0))
    assert [r.ratios["other"] for r in report.rows if r.metric == "goodput req/s"] == pytest.approx([0.5, 1.0, 2.0])


def _save(out: Path, target: str, seed: int, ok: int) -> Path:
    record = _record("rate=1", 0.5, ok=ok)
    run_dir = out / target / f"seed-{seed}"
    write(build_report("x", {"mix": "easy=1", "mode": "open", "rates": "1", "duration_s": 10.0}, SLOS, [record]),
          [record], run_dir)
    return run_dir / "requests.jsonl"


def test_summarize_rebuilds_the_report_from_the_raw_requests(tmp_path: Path) -> None:
    for seed in (0, 1):
        _save(tmp_path, "one-pool", seed, ok=10)
        requests = _save(tmp_path, "tiered", seed, ok=10)
    rows = [json.loads(line) for line in requests.read_text().splitlines()]
    rows[0]["status"] = 500  # a request of seed 1 that failed after all
    packed = requests.with_name("requests.jsonl.gz")  # committed results keep their raw requests compressed
    packed.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    requests.unlink()
    (tmp_path / "tiered" / "target.json").write_text(json.dumps({"kind": "thinktier", "policy": "t.yaml", "what": "split"}))
    report = summarize(tmp_path, "one-pool")
    assert report.targets == ["one-pool", "tiered"] and report.settings["tiered"] == "split (t.yaml)"
    goodput = next(s for s in report.spread if s.metric == "goodput req/s")
    ratios = goodput.ratios["tiered"]
    assert ratios is not None and (ratios.low, ratios.high) == pytest.approx((0.9, 1.0))
    text = (tmp_path / "compare.md").read_text()
    assert "## rate=1, over seeds 0, 1" in text and "## seed=1 rate=1" in text
    assert (tmp_path / "goodput_vs_load.png").stat().st_size > 0


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "thinktier", "loadtest", "compare", *args],
                          capture_output=True, text=True, timeout=120)


def test_the_cli_names_what_is_wrong_with_a_matrix_it_cannot_build(tmp_path: Path) -> None:
    empty = _cli("--summarize", str(tmp_path), "--baseline", "one-pool")
    assert empty.returncode == 2 and "no TARGET/seed-S/report.json" in empty.stderr
    _save(tmp_path, "tiered", 0, ok=10)
    no_baseline = _cli("--summarize", str(tmp_path), "--baseline", "one-pool")
    assert no_baseline.returncode == 2 and "baseline 'one-pool' has no run of seed 0" in no_baseline.stderr
    unknown = _cli("--targets", "one-pool,two-pools")
    assert unknown.returncode == 2 and "unknown ['two-pools']; choose from one-pool, one-pool-budgets" in unknown.stderr
