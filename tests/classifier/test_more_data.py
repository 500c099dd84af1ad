"""difficulty-v7's added rows (issue 33): the reasoner's problems labelled by the thinking they need, and a second
hand-written batch in thirteen languages; neither moves difficulty-v6's split, and the bench scores held-out reasoner
problems of another seed."""

from __future__ import annotations

from thinktier.deployments.classifier.difficulty_artifact import load_manifest
from thinktier.loadtest.bench.classifier_bench import REASONER_SLICE, reasoner_slices
from thinktier.training.classifier.classifier_config import TrainingConfig
from thinktier.training.classifier.classifier_training import examples_of, split_by_problem
from thinktier.training.data.chat_prompts import chat_prompts
from thinktier.training.data.problems import LANGUAGES
from thinktier.training.data.reasoner_prompts import reasoner_prompts
from thinktier.training.data.written_prompts import EXTRA_LANGUAGES, second_batch, written_prompts
from thinktier.training.reasoner.sizes import SIZES


def test_reasoner_rows_are_labelled_by_the_large_sizes_step_rule() -> None:
    rows = reasoner_prompts(20)
    large = SIZES["large"].difficulty
    assert len(rows) == 20 * 3 * 3 and len({r.id for r in rows}) == len(rows)
    for row in rows:
        assert row.label == large.of(row.steps)
        lo, hi = large.counts(row.label)
        assert lo <= row.steps <= hi and str(row.steps) in row.text
    assert {(r.language, r.label) for r in rows} == {(lang, c) for lang in ("en", "es", "fr") for c in ("easy", "medium", "hard")}
    # the small size's hard chains (22-32 steps) fit the large's medium budget: the rule is the large size's
    assert large.of(25) == "medium" and large.of(31) == "hard" and large.of(3) == "medium"


def test_the_reasoner_rows_are_a_modest_share_of_training() -> None:
    examples = examples_of(TrainingConfig())
    share = sum(e.problem_id.startswith("reasoner:") for e in examples) / len(examples)
    assert 0 < share < 0.05


def test_the_benchs_reasoner_problems_are_of_another_seed_and_never_trained_on() -> None:
    slices = reasoner_slices(TrainingConfig().reasoner_per_class)
    assert set(slices) == {REASONER_SLICE, *(f"{REASONER_SLICE}:{lang}" for lang in ("en", "es", "fr"))}
    trained = {e.text for e in examples_of(TrainingConfig())}
    rows = slices[REASONER_SLICE]
    assert rows and not {r.text for r in rows} & trained
    assert {r.label for r in rows} == {"easy", "medium", "hard"}


def test_the_second_batch_covers_thirteen_languages_with_long_chat() -> None:
    prompts = second_batch(list(LANGUAGES))
    assert {p.language for p in prompts} == set(LANGUAGES) | set(EXTRA_LANGUAGES)
    for language in {*LANGUAGES, *EXTRA_LANGUAGES}:
        labels = [p.label for p in prompts if p.language == language]
        assert labels.count("chat") >= 6 and labels.count("hard") >= 5 and labels.count("medium") >= 3, language
    longest_one_liner = max(len(c.text) for c in chat_prompts(["en", "es", "fr", "pt", "vi"]))
    latin = [p for p in prompts if p.label == "chat" and p.language in ("en", "es", "fr", "pt", "vi", "de")]
    assert min(len(p.text) for p in latin) > longest_one_liner
    texts = [p.text for p in prompts]
    first = {p.text for p in written_prompts(list(LANGUAGES))}
    assert len(set(texts)) == len(texts) and not set(texts) & first
    assert all(p.id.startswith("written-2:") for p in prompts)


def test_v7s_sources_never_move_v6s_split() -> None:
    """The bench scores v6 on v7's held-out rows: every row v6 held out is held out by v7, and v7 adds only its own."""
    v6 = load_manifest("builtin:difficulty-v6").provenance
    _, held = split_by_problem(examples_of(TrainingConfig()), v6.held_out_fraction, v6.seed)
    held_v6 = {pid for ids in v6.held_out_problems.values() for pid in ids}
    held_v7 = {e.problem_id for e in held}
    assert held_v6 < held_v7
    assert {pid.split(":")[0] for pid in held_v7 - held_v6} == {"written-2", "reasoner"}
