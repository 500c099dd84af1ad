"""The reasoner's task family and training documents: answers are checked exactly, traces work the chain correctly
(apart from the slips they are meant to have), and every serving shape of a thinking section is taught."""

from __future__ import annotations

import random
import re

import pytest

from thinktier.loadtest.bench.reasoner.behaviours import BehaviourSettings
from thinktier.training.reasoner.corpus import CorpusMix, ExampleEncoder, build_tokenizer, examples
from thinktier.training.reasoner.sizes import SIZES
from thinktier.training.reasoner.tasks import LANGUAGES, ChainProblem, problems, sample_chat
from thinktier.training.reasoner.traces import (
    PROBE,
    TraceSettings,
    full_document,
    off_answer,
    problem_trace,
    thinking_lines,
)

EXACT = TraceSettings(slip_rate=0.0)


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    return build_tokenizer(seed=0, documents=200)


def test_answer_is_the_chain_modulo_100_and_checked_exactly() -> None:
    problem = ChainProblem(start=95, step=17, count=3)
    assert problem.answer == (95 + 51) % 100 == 46
    assert problem.is_correct("The number you end with is $\\boxed{46}$.")
    assert not problem.is_correct("The number you end with is $\\boxed{47}$.")
    assert not problem.is_correct("")
    assert ChainProblem(start=0, step=50, count=2).is_correct("\\boxed{00}")  # 0 written with two digits


def test_prompts_are_in_three_languages_and_name_the_numbers() -> None:
    rng = random.Random(3)
    for language in LANGUAGES:
        problem = ChainProblem(start=12, step=34, count=56, language=language, template=rng.randrange(3))
        assert {"12", "34", "56"} <= set(re.findall(r"\d+", problem.prompt))
    assert len({ChainProblem(1, 11, 1, lang).prompt for lang in LANGUAGES}) == 3


def test_evaluation_sets_are_seeded_and_respect_the_class_ranges() -> None:
    difficulty = SIZES["small"].difficulty
    first, again = problems(difficulty, 10, seed=5), problems(difficulty, 10, seed=5)
    assert first == again
    assert first != problems(difficulty, 10, seed=6)
    for name, problem in first:
        lo, hi = difficulty.counts(name)
        assert lo <= problem.count <= hi
        assert difficulty.of(problem.count) == name


def test_exact_trace_reaches_the_answer_and_checks_itself() -> None:
    problem = ChainProblem(start=7, step=48, count=12)
    lines = thinking_lines(problem, random.Random(0), EXACT)
    text = "".join(line.text for line in lines)
    first_pass = text.split("That makes")[0]
    steps = re.findall(r"^(\d+)\+48: .*?, so (\d+); (\d+) to go\.$", first_pass, re.MULTILINE)
    assert [int(to_go) for _, _, to_go in steps] == list(range(11, -1, -1))
    assert all(int(kept) == (int(before) + 48) % 100 for before, kept, _ in steps)
    assert f"That makes {problem.answer}." in text
    assert text.endswith(f"So the answer is {problem.answer}.\n")


def test_check_lengths_vary_and_slips_happen_at_about_the_set_rate() -> None:
    rng = random.Random(1)
    checks = set()
    wrong = total = 0
    for _ in range(200):
        problem = ChainProblem(start=rng.randrange(100), step=rng.randrange(11, 100), count=20)
        lines = thinking_lines(problem, rng, TraceSettings(slip_rate=0.02))
        text = "".join(line.text for line in lines)
        found = re.search(r"check the first (\d+) steps", text)
        checks.add(int(found.group(1)) if found else 0)
        for before, step, kept in re.findall(r"^(\d+)\+(\d+): .*?, so (\d+);", text.split("That makes")[0], re.MULTILINE):
            total += 1
            wrong += int(kept) != (int(before) + int(step)) % 100
    assert len(checks) >= 15  # the overthinking has many lengths, from one step to all twenty
    assert min(checks - {0}) <= 2 and max(checks) == 20
    assert 0.01 < wrong / total < 0.08  # two columns, 2% each


def test_every_serving_shape_is_taught_and_the_forced_tokens_are_not(tokenizer) -> None:  # type: ignore[no-untyped-def]
    end = tokenizer.convert_tokens_to_ids("</think>")
    probe_ids = tokenizer.encode(PROBE, add_special_tokens=False)
    seen = {"full": 0, "cut": 0, "probe": 0, "off": 0, "chat": 0}
    one_step_off = 0
    stream = examples(tokenizer, SIZES["small"].difficulty, 0, CorpusMix(), EXACT, max_count=6)
    for _ in range(300):
        count, example = next(stream)
        text = tokenizer.decode(example.ids)
        learned = [i for i, keep in zip(example.ids, example.learned, strict=True) if keep]
        if count == 0:
            seen["chat"] += 1
        elif "Oh, I suddenly got the answer" in text:
            seen["probe"] += 1
            assert not any(learned[i:i + len(probe_ids)] == probe_ids for i in range(len(learned)))
        elif "<think>\n</think>" in text:
            seen["off"] += 1
            one_step_off += count == 1
        elif re.search(r"(So the answer is|That makes) \d+\.\n</think>", text):
            seen["full"] += 1
            assert end in learned  # the model ends its own thinking
        else:
            seen["cut"] += 1
            assert end not in learned  # a forced end is never learned
    assert all(n > 0 for n in seen.values()), seen
    assert one_step_off > seen["off"] / 2  # thinking off is taught mostly where it can be right


def test_cut_answer_is_the_best_value_so_far(tokenizer) -> None:  # type: ignore[no-untyped-def]
    problem = ChainProblem(start=10, step=20, count=8)
    trace = problem_trace(problem, random.Random(0), EXACT)
    encoder = ExampleEncoder(tokenizer)
    for seed in range(20):
        text = tokenizer.decode(encoder.cut(trace, random.Random(seed), probe=False).ids)
        thinking = text.split("<think>\n")[1].split("</think>")[0]
        done = re.findall(r"so (\d+); \d+ to go\.\n", thinking.split("That makes")[0])
        best = int(done[-1]) if done else problem.start
        if "That makes" in thinking and thinking.split("That makes")[1].strip():
            best = problem.answer
        assert text.endswith(f"$\\boxed{{{best}}}$.<|im_end|>")


def test_short_chains_take_their_share_of_long_chain_draws(tokenizer) -> None:  # type: ignore[no-untyped-def]
    """A size whose chains run long still sees chains of a few steps (the large stopped two-step chains after one
    step when they were 1.6 % of its problems)."""
    def counts(mix: CorpusMix) -> list[int]:
        stream = examples(tokenizer, SIZES["large"].difficulty, 0, mix, EXACT, max_count=140)
        return [count for count, _ in (next(stream) for _ in range(400)) if count > 0]

    plain, short = counts(CorpusMix(off=0.0)), counts(CorpusMix(off=0.0, short_chains=0.3))
    assert sum(c <= 4 for c in plain) / len(plain) < 0.1
    assert 0.2 < sum(c <= 4 for c in short) / len(short) < 0.4


def test_a_forced_end_can_teach_what_follows_the_closing_tag(tokenizer) -> None:  # type: ignore[no-untyped-def]
    """The budget processor forces `</think>` alone; with `learn_after_close` the model learns to write the blank
    line after it and then the answer, from the same tokens as without it."""
    trace = problem_trace(ChainProblem(start=10, step=20, count=8), random.Random(0), EXACT)
    encoder = ExampleEncoder(tokenizer)
    end = tokenizer.convert_tokens_to_ids("</think>")
    for seed in range(10):
        plain = encoder.cut(trace, random.Random(seed), probe=False)
        taught = encoder.cut(trace, random.Random(seed), probe=False, learn_after_close=True)
        assert taught.ids == plain.ids
        after = taught.ids.index(end) + 1
        assert not taught.learned[after - 1] and taught.learned[after]
        assert tokenizer.decode(taught.ids[after:]).startswith("\n\n")
        assert not plain.learned[after]


def test_full_document_answers_in_the_prompt_language() -> None:
    rng = random.Random(0)
    problem = ChainProblem(start=3, step=30, count=2, language="fr")
    doc = full_document(problem_trace(problem, rng, EXACT))
    assert doc.segments[-1].text.startswith("Le nombre final est")
    assert sample_chat(random.Random(0), "es").language == "es"


def test_easy_chains_are_answered_at_once_and_long_ones_mostly_checked() -> None:
    rng = random.Random(3)

    def checked(count: int) -> float:
        runs = [thinking_lines(ChainProblem(start=5, step=17, count=count), rng, EXACT) for _ in range(300)]
        return sum(any("check the first" in line.text for line in lines) for lines in runs) / len(runs)

    assert checked(1) == checked(2) == 0.0
    assert 0.8 < checked(20) < 0.97


def test_thinking_off_shows_one_step_working_and_answers_longer_chains_directly() -> None:
    one = ChainProblem(start=47, step=38, count=1, language="es")
    answer = off_answer(one)
    assert answer.startswith("7+8=15, 4+3+1=8.\n") and answer.endswith("$\\boxed{85}$.") and one.is_correct(answer)
    longer = ChainProblem(start=47, step=38, count=9)
    assert off_answer(longer) == longer.answer_text(longer.answer)  # no working: it cannot be worked out unthinking


def test_thinking_off_answer_fits_the_answer_budget(tokenizer) -> None:  # type: ignore[no-untyped-def]
    longest = max(len(tokenizer.encode(off_answer(ChainProblem(start, 99, 1, language)) + "<|im_end|>",
                                       add_special_tokens=False))
                  for start in range(0, 100, 3) for language in LANGUAGES)
    assert longest <= BehaviourSettings().answer_tokens


def test_restated_checks_carry_the_result_to_the_answer_line() -> None:
    problem = ChainProblem(start=26, step=18, count=13)
    settings = TraceSettings(slip_rate=0.0, check_rate=1.0, restate_result=True)
    lines = [line.text for line in thinking_lines(problem, random.Random(0), settings)]
    checks = [text for text in lines if text.startswith("Again ")]
    assert checks and all(text.endswith(f"; checking {problem.answer}.\n") for text in checks)
    assert lines[-1] == f"So the answer is {problem.answer}.\n"
    plain = thinking_lines(problem, random.Random(0), EXACT)
    assert not any("checking" in line.text for line in plain)  # the small size's shipped traces are unchanged
