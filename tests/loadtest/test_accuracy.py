"""Checked answers in the load test: the reasoner's task family as a workload, and accuracy and correct goodput in
the report. No network, no engine."""

from __future__ import annotations

import argparse

import pytest

from thinktier.cli import loadtest as cli_loadtest
from thinktier.loadtest.client import RequestResult
from thinktier.loadtest.metrics_scraper import MetricsTimeline
from thinktier.loadtest.report import Report, build_report, markdown
from thinktier.loadtest.runner import RunRecord
from thinktier.loadtest.workload import REQUEST_CLASSES, ExactReply, Mix, PromptPool, open_loop
from thinktier.policies.schema import SLO, DifficultyClass
from thinktier.training.reasoner.sizes import SIZES
from thinktier.training.reasoner.tasks import ChainProblem

SLOS: dict[DifficultyClass, SLO] = {
    "easy": SLO(ttfvt_s=1, e2e_s=5), "medium": SLO(ttfvt_s=10, e2e_s=50), "hard": SLO(ttfvt_s=60, e2e_s=100)
}
WINDOW_S = 10.0

# ---- the reasoner workload ---------------------------------------------------------------------------


def test_reasoner_pool_has_every_class_each_prompt_with_its_answer_checker() -> None:
    pool = PromptPool.reasoner("small", seed=3, per_class=20)
    difficulty = SIZES["small"].difficulty
    assert {c: len(pool.by_class[c]) for c in REQUEST_CLASSES} == dict.fromkeys(REQUEST_CLASSES, 20)
    for cls in ("easy", "medium", "hard"):
        lo, hi = difficulty.counts(cls)
        for prompt in pool.by_class[cls]:
            problem = prompt.answer
            assert isinstance(problem, ChainProblem) and prompt.text == problem.prompt
            assert lo <= problem.count <= hi
            assert problem.is_correct(problem.answer_text(problem.answer))
            assert not problem.is_correct(problem.answer_text((problem.answer + 1) % 100))
    for prompt in pool.by_class["chat"]:
        reply = prompt.answer
        assert isinstance(reply, ExactReply)
        assert reply.is_correct(f"  {reply.reply}\n") and not reply.is_correct(reply.reply + " Anything else?")


def test_reasoner_pool_is_seeded() -> None:
    first, again, other = (PromptPool.reasoner("small", seed, per_class=10) for seed in (5, 5, 6))
    assert first.by_class == again.by_class
    assert first.by_class != other.by_class
    mix = Mix.parse("easy=1,medium=1,hard=1,chat=1")
    assert open_loop(first, mix, 5.0, 0.5, 20.0, seed=1) == open_loop(again, mix, 5.0, 0.5, 20.0, seed=1)


def test_reasoner_pool_takes_one_language_or_all() -> None:
    french = PromptPool.reasoner("large", seed=0, languages=["fr"], per_class=10)
    problems = [p.answer for c in ("easy", "medium", "hard") for p in french.by_class[c]]
    assert {p.language for p in problems if isinstance(p, ChainProblem)} == {"fr"} and len(problems) == 30
    with pytest.raises(ValueError, match="give one of them or all"):
        PromptPool.reasoner("small", seed=0, languages=["en", "fr"])


def _parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli_loadtest.register(parser.add_subparsers())
    return parser.parse_args(["loadtest", "run", "--url", "http://127.0.0.1:1", *argv])


def test_prompts_flag_picks_the_reasoner_workload_seeded_by_seed() -> None:
    pool = cli_loadtest.pool_of(_parsed("--prompts", "reasoner-small", "--seed", "7"))
    assert pool.by_class == PromptPool.reasoner("small", seed=7, languages=["en"]).by_class
    assert _parsed().prompts == "held-out"
    with pytest.raises(SystemExit, match="give one of them or all"):
        cli_loadtest.pool_of(_parsed("--prompts", "reasoner-small", "--languages", "zh"))


# ---- accuracy and correct goodput in the report ----------------------------------------------------------


def _result(cls: str, e2e_s: float, correct: bool | None, status: int = 200) -> RequestResult:
    return RequestResult(0, cls, "x", 0.0, status=status, ttft_s=0.5, ttfvt_s=0.5, e2e_s=e2e_s, completion_tokens=10,
                         correct=correct)


def _report(results: list[RequestResult]) -> Report:
    return build_report("t", {}, SLOS, [RunRecord("r", "open", 1.0, 1.0, WINDOW_S, results, MetricsTimeline())])


def _cell(table_markdown: str, row: str, column: str) -> str:
    """One cell of the first Markdown table with this row label and this column."""
    lines = table_markdown.splitlines()
    for i, line in enumerate(lines):
        header = [c.strip() for c in line.strip("|").split("|")]
        if column in header:
            for body in lines[i + 2:]:
                if not body.startswith("|"):
                    break
                cells = [c.strip() for c in body.strip("|").split("|")]
                if cells[0] == row:
                    return cells[header.index(column)]
    raise AssertionError(f"no cell {row!r} / {column!r}")


def test_correct_goodput_counts_right_answers_that_met_their_slo() -> None:
    results = [
        _result("easy", 4.0, True),  # met, right
        _result("easy", 4.0, True),  # met, right
        _result("easy", 4.0, False),  # met, wrong
        _result("easy", 9.0, True),  # right, but E2E past the easy SLO
        _result("easy", 0.0, False, status=429),  # shed: not an ok request, so not in accuracy
    ]
    report = _report(results)
    run = report.runs[0]
    easy = run.classes["easy"]
    assert (easy.slo_met, easy.checked, easy.correct, easy.correct_slo_met) == (3, 4, 3, 2)
    assert easy.accuracy == pytest.approx(3 / 4)
    assert run.correct_goodput_rps == easy.correct_goodput_rps == pytest.approx(2 / WINDOW_S)
    assert run.goodput_rps == pytest.approx(3 / WINDOW_S)
    text = markdown(report)
    assert _cell(text, "r", "correct goodput req/s") == "0.20" and _cell(text, "r", "accuracy") == "0.75"
    assert _cell(text, "easy", "accuracy") == "0.75"


def test_accuracy_is_per_class() -> None:
    run = _report([_result("easy", 1.0, True), _result("hard", 1.0, False), _result("chat", 1.0, True)]).runs[0]
    assert {c: s.accuracy for c, s in run.classes.items()} == {"easy": 1.0, "hard": 0.0, "chat": 1.0}
    assert run.overall.accuracy == pytest.approx(2 / 3)


def test_without_checkable_answers_the_report_shows_no_accuracy_not_zero() -> None:
    report = _report([_result("easy", 4.0, None), _result("hard", 4.0, None)])
    run = report.runs[0]
    assert (run.overall.accuracy, run.correct_goodput_rps, run.classes["easy"].correct_goodput_rps) == (None, None, None)
    text = markdown(report)
    assert _cell(text, "r", "accuracy") == "-" and _cell(text, "r", "correct goodput req/s") == "-"
    assert _cell(text, "all", "accuracy") == "-"


def test_a_checkable_class_with_every_request_shed_has_no_accuracy_and_zero_correct_goodput() -> None:
    run = _report([_result("hard", 0.0, False, status=429)]).runs[0]
    assert (run.overall.accuracy, run.correct_goodput_rps) == (None, 0.0)


def test_reports_saved_before_answers_were_checked_still_load() -> None:
    saved = _report([_result("easy", 4.0, None)]).model_dump(mode="json")
    for stats in [saved["runs"][0]["overall"], *saved["runs"][0]["classes"].values()]:
        for name in ("checked", "correct", "accuracy", "correct_slo_met", "correct_goodput_rps"):
            del stats[name]
    del saved["runs"][0]["correct_goodput_rps"]
    assert Report.model_validate(saved).runs[0].overall.accuracy is None
