"""The economy bench without an engine: the prompt sets, the vote of the first n samples, the aims met or missed, the
markdown report, and (with a fake engine) which samples the bench decodes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import pytest

from thinktier.deployments.tier.protocol import Economy, TierChunk, TierRequest
from thinktier.deployments.tier.self_consistency import Vote
from thinktier.loadtest.bench.economy_bench import EconomyBench, EconomySettings
from thinktier.loadtest.bench.economy_prompts import (
    FEW_SHOT,
    BenchPrompt,
    Task,
    arithmetic_prompts,
    bench_prompts,
    describe,
)
from thinktier.loadtest.bench.economy_report import (
    Aim,
    CertaintyRow,
    ConsensusRow,
    PrefillRow,
    aims,
    markdown,
    summarize,
    vote_accuracy,
    vote_of_first,
)
from thinktier.policies.schema import DifficultyClass, EarlyExit
from thinktier.training.reasoner.sizes import SIZES
from thinktier.training.reasoner.tasks import problems

if TYPE_CHECKING:
    from thinktier.deployments.tier.engine import TierEngine


def consensus_row(difficulty: DifficultyClass, answers: list[str], truth: str = "7", tokens: int = 100,
                  tokens_early: int = 500, answer_early: str | None = None) -> ConsensusRow:
    early = answer_early or vote_of_first(answers, [a == truth for a in answers], len(answers))[0]
    return ConsensusRow(difficulty=difficulty, answers=list(answers), correct=[a == truth for a in answers],
                        tokens=[tokens] * len(answers), answer_early=early, correct_early=early == truth,
                        tokens_early=tokens_early, aborted=1)


def certainty_row(plain: str, exit_: str, thinking_plain: int, thinking_exit: int, truth: str = "7") -> CertaintyRow:
    return CertaintyRow(difficulty="hard", answer_plain=plain, answer_exit=exit_, correct_plain=plain == truth,
                        correct_exit=exit_ == truth, thinking_plain=thinking_plain, thinking_exit=thinking_exit,
                        probes=2, exited=thinking_exit < thinking_plain)


RIGHT_VOTE = ["7", "7", "7", "1", "2"]
"""Three of five samples right, and every vote of its first n."""
WRONG_VOTE = ["1", "1", "1", "7", "7"]
"""Two of five right, no vote of its first n."""
TIED_RIGHT = ["7", "7", "1", "1", "2"]
"""Two of five right; the tie of four goes to 7, given first."""
HARD = [consensus_row("hard", RIGHT_VOTE)] * 5 + [consensus_row("hard", WRONG_VOTE)] * 4 + [consensus_row("hard", TIED_RIGHT)]
"""One sample is right half the time, a vote of five 60 %: exactly ten points."""
EASY = [consensus_row("easy", ["3", "5", "5", "5", "5"], truth="5"), consensus_row("easy", ["5", "3", "3", "5", "5"], truth="5")]


def by_name(summary: dict[str, Any]) -> dict[str, Aim]:
    return {aim.name: aim for aim in aims(summary)}


def test_the_vote_of_the_first_n_samples_counts_equal_values_as_one_answer_and_ties_go_to_the_first() -> None:
    answers: list[str | None] = ["41", None, "42", "42.0", "84/2", "41"]
    correct = [a is not None and a != "41" for a in answers]
    assert vote_of_first(answers, correct, 1) == ("41", False)
    assert vote_of_first(answers, correct, 2) == ("41", False)  # an empty answer votes for nothing
    assert vote_of_first(answers, correct, 3) == ("41", False)  # 1 against 1: the first answer given
    assert vote_of_first(answers, correct, 4) == ("42", True)
    assert vote_of_first(answers, correct, 6) == ("42", True)  # 3 against 2
    assert vote_of_first([None, None], [False, False], 2) == (None, False)


def test_accuracy_for_1_to_n_samples_per_class_and_over_all() -> None:
    accuracy = vote_accuracy(HARD + EASY)
    assert list(accuracy) == ["easy", "hard", "all"]
    assert accuracy["hard"] == pytest.approx([0.6] * 5)
    assert accuracy["easy"] == pytest.approx([0.5, 0.5, 0.5, 1.0, 1.0])  # 3,5 is a tie of 3; 5,3,3 votes 3
    assert accuracy["all"] == pytest.approx([7 / 12, 7 / 12, 7 / 12, 8 / 12, 8 / 12])
    votes = summarize([], HARD + EASY, [])["votes"]
    assert votes["accuracy_of_first_n"] == accuracy
    assert votes["one_sample_accuracy"] == pytest.approx({"easy": 0.7, "hard": 0.5, "all": 6.4 / 12})


def test_the_vote_aim_needs_ten_points_on_hard_prompts_over_one_sample() -> None:
    exactly_ten = by_name(summarize([], HARD, []))["voting"]
    assert exactly_ten.met is True and "one sample 50%, vote of 5 60% (+10 points)" in exactly_ten.measured
    agreeing = [consensus_row("hard", ["7"] * 5), consensus_row("hard", ["1"] * 5)]
    assert by_name(summarize([], agreeing, []))["voting"].met is False  # voting cannot help samples that all agree
    assert by_name(summarize([], EASY, []))["voting"].met is None  # no hard prompts
    assert by_name(summarize([], [consensus_row("hard", RIGHT_VOTE[:4])], []))["voting"].met is None  # four samples
    assert by_name(summarize([], [], []))["voting"].met is None


def test_the_consensus_aim_needs_forty_percent_fewer_tokens_and_the_same_answer_on_ninety_percent() -> None:
    saving = [consensus_row("hard", RIGHT_VOTE, tokens=100, tokens_early=300)] * 10  # 500 -> 300: 40 % fewer
    summary = summarize([], saving, [])
    assert summary["consensus"]["tokens_saved_share"] == pytest.approx(0.4)
    assert by_name(summary)["early consensus"].met is True
    one_differs = saving[:8] + [consensus_row("hard", RIGHT_VOTE, tokens_early=300, answer_early="1")] * 2
    summary = summarize([], one_differs, [])
    assert summary["consensus"]["same_answer_share"] == pytest.approx(0.8)
    assert summary["consensus"]["accuracy_full"] == 1.0 and summary["consensus"]["accuracy_early"] == pytest.approx(0.8)
    assert by_name(summary)["early consensus"].met is False
    assert by_name(summarize([], [consensus_row("hard", RIGHT_VOTE, tokens_early=350)], []))["early consensus"].met is False
    tied = [consensus_row("hard", ["1", "7", "7", "1", "2"], answer_early=early) for early in ("7", "1", "2")]
    assert summarize([], tied, [])["consensus"]["same_answer_share"] == pytest.approx(2 / 3)  # either of a tie is the same


def test_staged_samples_are_judged_by_the_same_consensus_aim_beside_the_samples_started_together() -> None:
    def staged_row(tokens_staged: int, answer: str = "7") -> ConsensusRow:
        row = consensus_row("hard", RIGHT_VOTE, tokens=100, tokens_early=450)
        return replace(row, answer_staged=answer, correct_staged=answer == "7", tokens_staged=tokens_staged,
                       started_staged=3, seconds_early=10.0, seconds_staged=15.0)

    summary = summarize([], [staged_row(300)] * 9 + [staged_row(300, answer="1")], [])
    staged = summary["consensus"]["staged"]
    assert staged["tokens_saved_share"] == pytest.approx(0.4) and staged["same_answer_share"] == pytest.approx(0.9)
    assert staged["accuracy"] == pytest.approx(0.9) and staged["samples_started_mean"] == 3
    assert by_name(summary)["early consensus, staged samples"].met is True
    assert by_name(summary)["early consensus"].met is False  # 500 -> 450 with the samples started together
    assert by_name(summarize([], [staged_row(310)] * 10, []))["early consensus, staged samples"].met is False
    assert by_name(summarize([], HARD, []))["early consensus, staged samples"].met is None  # a run without staging
    text = markdown(report_of(summary), aims(summary))
    assert "| early consensus, samples together | staged samples |" in text
    assert "| samples started per prompt (mean) | 5 | 5 | 3.0 |" in text
    assert "| wall time per vote, median (one prompt at a time) | - | 10.0 s | 15.0 s (median ratio 1.50x) |" in text


def test_the_certainty_aim_needs_a_quarter_of_the_thinking_saved_and_accuracy_within_a_point() -> None:
    rows = [certainty_row("7", "7", 400, 300)] * 4
    summary = summarize([], [], rows)
    assert summary["certainty"]["thinking_saved_share"] == pytest.approx(0.25)
    assert by_name(summary)["certainty exit"].met is True
    one_lost = [certainty_row("7", "7", 400, 300)] * 99 + [certainty_row("7", "1", 400, 300)]
    summary = summarize([], [], one_lost)
    assert summary["certainty"]["accuracy_exit"] == pytest.approx(0.99)
    assert by_name(summary)["certainty exit"].met is True  # one point lower: within the aim
    two_lost = [certainty_row("7", "7", 400, 300)] * 48 + [certainty_row("7", "1", 400, 300)]
    assert by_name(summarize([], [], two_lost))["certainty exit"].met is False
    gained = [certainty_row("1", "7", 400, 300)] + [certainty_row("7", "7", 400, 300)] * 3
    assert by_name(summarize([], [], gained))["certainty exit"].met is True  # a better answer is no loss
    too_little = [certainty_row("7", "7", 400, 320)]
    assert by_name(summarize([], [], too_little))["certainty exit"].met is False
    where_same = summarize([], [], [certainty_row("7", "7", 400, 100), certainty_row("7", "1", 400, 400)])["certainty"]
    assert where_same["thinking_saved_share"] == pytest.approx(0.375) and where_same["thinking_saved_share_where_same"] == 0.75


def report_of(summary: dict[str, Any], temperature: float = 0.6) -> dict[str, Any]:
    settings = {"samples": 5, "consensus": 3, "temperature": 0.6, "interval_tokens": 8, "agree": 2}
    return {"model": "builtin:reasoner-small", "device": "CPU", "command": "thinktier bench economy --task reasoner",
            "settings": settings, "prompts": "12 problems", "wall_s": 1.0, "summary": summary,
            "certainty_temperature": temperature}


def test_the_report_states_each_aim_with_its_value_and_verdict_and_the_accuracy_table() -> None:
    rows = [certainty_row("7", "7", 400, 100)]
    summary = summarize([PrefillRow(100, {"shared": 110, "vllm_n": 110, "separate": 500})], HARD + EASY, rows)
    text = markdown(report_of(summary), aims(summary))
    assert "| voting | a vote of 5 beats one sample on hard prompts by at least 10 points | hard: one sample 50%" in text
    assert "(+10 points) | met |" in text
    assert "| certainty exit |" in text and "75% fewer; accuracy 100.0% -> 100.0% (+0.0 points) | met |" in text
    assert "| early consensus |" in text and "| **missed** |" in text  # 500 -> 500 tokens
    assert "| samples voting | easy | hard | all |" in text
    assert "| 1 | 50% | 60% | 58% |" in text and "| 5 | 100% | 60% | 67% |" in text
    assert "| one sample, mean of the N | 70% | 50% | 53% |" in text
    assert "temperature 0.6, the same seed with and without probes" in text and "1.10x" in text


def test_a_report_without_prefill_or_consensus_marks_their_aims_not_measured() -> None:
    summary = summarize([], [], [certainty_row("7", "7", 400, 100)])
    text = markdown(report_of(summary, temperature=0.0), aims(summary))
    assert "## Prefill" not in text and "## Accuracy" not in text and "(greedy)" in text
    assert text.count("| not measured |") == 3  # voting, and early consensus with samples together and staged


def test_reasoner_prompts_are_seeded_problems_per_class_without_a_system_prompt() -> None:
    prompts = bench_prompts("reasoner", 31, seed=3)
    assert [p.difficulty for p in prompts] == ["easy"] * 10 + ["medium"] * 10 + ["hard"] * 10
    assert [p.messages for p in prompts] != [p.messages for p in bench_prompts("reasoner", 31, seed=4)]
    drawn = problems(SIZES["small"].difficulty, 10, seed=3)
    assert [p.messages for p in prompts] == [({"role": "user", "content": problem.prompt},) for _, problem in drawn]
    assert all(p.check(f"\\boxed{{{problem.answer}}}") for p, (_, problem) in zip(prompts, drawn, strict=True))
    assert not any(p.check(f"\\boxed{{{problem.answer + 1}}}") for p, (_, problem) in zip(prompts, drawn, strict=True))
    assert "(10 easy, 10 medium, 10 hard), no system prompt" in describe("reasoner", prompts)


def test_arithmetic_prompts_follow_the_few_shot_block_and_compare_answers_by_value() -> None:
    question = arithmetic_prompts(1, seed=0)[0]
    a, b = question.messages[1]["content"].removeprefix("What is ").removesuffix("?").split(" + ")
    truth = int(a) + int(b)
    assert question.difficulty == "easy" and question.messages[0] == {"role": "system", "content": FEW_SHOT}
    assert question.check(f"So it is \\boxed{{{truth}.0}}.") and not question.check(f"\\boxed{{{truth + 1}}}")
    assert describe("arithmetic", arithmetic_prompts(4, seed=0)) == "4 easy arithmetic prompts with a few-shot system prompt"


ANSWERS = ("7", "7", "1")


class FakeEngine:
    """Decodes a sample's answer from its seed (7, 7, 1, ...) and votes as TierEngine does."""

    tier = SimpleNamespace(engine=SimpleNamespace(max_model_len=4096), early_exit=EarlyExit(probe="Answer: ", probe_tokens=4))

    def __init__(self) -> None:
        self.requests: list[TierRequest] = []

    async def _one(self, request: TierRequest) -> AsyncIterator[TierChunk]:
        self.requests.append(request)
        seed = request.seed or 0
        economy = Economy(probes=1) if request.certainty_exit else None
        yield TierChunk(content=f"\\boxed{{{ANSWERS[seed % 3]}}}", finish_reason="stop", reasoning_tokens=10 + seed % 3,
                        answer_tokens=2, economy=economy)

    def generate(self, request: TierRequest) -> AsyncIterator[TierChunk]:
        return Vote(request, self._one, None).stream() if request.samples > 1 else self._one(request)


def test_the_bench_decodes_the_samples_of_the_vote_one_by_one_with_their_seeds_and_one_salt() -> None:
    engine = FakeEngine()
    bench = EconomyBench(cast("TierEngine", engine), EconomySettings(task="reasoner", samples=5, consensus=5, seed=2))
    prompt = BenchPrompt(({"role": "user", "content": "q"},), "hard", lambda text: "7" in text)
    row = asyncio.run(bench.consensus(1, prompt))
    full = engine.requests[:5]
    assert [r.seed for r in full] == [10005 + j for j in range(5)] and {r.cache_salt for r in full} == {"cs-full-1"}
    assert row.answers == ["7", "7", "1", "7", "7"]  # seeds (2 x 1000 + 1) x 5 + j, answers 7, 7, 1 by seed mod 3
    assert row.correct == [True, True, False, True, True] and row.tokens == [12, 13, 14, 12, 13]
    early, staged = engine.requests[5:10], engine.requests[10:]
    assert [r.seed for r in early] == [r.seed for r in staged] == [r.seed for r in full]  # the same decodes each time
    assert row.answer_early == "7" and row.correct_early and row.tokens_early == sum(row.tokens)
    assert row.answer_staged == "7" and row.tokens_staged == sum(row.tokens) and row.started_staged == 5


@pytest.mark.parametrize(("task", "temperature"), [("arithmetic", 0.0), ("reasoner", 0.6)])
def test_certainty_decodes_one_seeded_sample_with_and_without_probes(task: Task, temperature: float) -> None:
    engine = FakeEngine()
    settings = EconomySettings(task=task, temperature=0.6, seed=1)
    row = asyncio.run(EconomyBench(cast("TierEngine", engine), settings).certainty(4, bench_prompts(settings.task, 3, 1)[0]))
    plain, probed = engine.requests
    assert plain.seed == probed.seed == (1000 + 4) * 8 and plain.temperature == probed.temperature == temperature
    assert plain.certainty_exit is None and row.probes == 1
    assert probed.certainty_exit == EarlyExit(interval_tokens=8, agree=2, probe="Answer: ", probe_tokens=4)  # the tier's probe
