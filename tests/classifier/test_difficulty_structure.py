"""Language-neutral structure features of the difficulty classifier (difficulty-v4's extra block)."""

from __future__ import annotations

import numpy as np
import pytest

from thinktier.deployments.classifier.difficulty_structure import STRUCTURE_FEATURES, standardiser, structure

MATH = ("digits", "numbers", "latex_commands", "dollars", "fractions_roots_binomials", "super_subscripts", "equals")


def test_a_formula_counts_the_same_in_every_language() -> None:
    english = structure("Find the number of integers $n$ with $\\frac{n^2}{7} = 3$.", tokens=20)
    chinese = structure("求满足 $\\frac{n^2}{7} = 3$ 的整数 $n$ 的个数。", tokens=20)
    for name in MATH:
        i = STRUCTURE_FEATURES.index(name)
        assert english[i] == pytest.approx(chinese[i]), name


def test_small_talk_has_no_mathematics() -> None:
    row = structure("你好，今天天气怎么样？", tokens=8)  # noqa: RUF001 (full-width punctuation, as Chinese is written)
    assert row.shape == (len(STRUCTURE_FEATURES),)
    assert all(row[STRUCTURE_FEATURES.index(name)] == 0 for name in MATH)
    assert row[STRUCTURE_FEATURES.index("question_marks")] > 0


def test_standardised_rows_have_a_norm_near_one() -> None:
    rows = np.random.default_rng(0).normal(3.0, 2.0, size=(500, len(STRUCTURE_FEATURES))).astype(np.float32)
    mean, scale = standardiser(rows)
    norms = np.linalg.norm((rows - np.asarray(mean)) / np.asarray(scale), axis=1)
    assert float(np.mean(norms**2)) == pytest.approx(1.0, rel=0.01)
