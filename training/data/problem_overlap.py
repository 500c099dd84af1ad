"""Which problems are copies of others: the same text, or the same template with other numbers.

An external test set (training/data/external_problems.py) must not hold a problem that the classifier trained on, nor one
of its templates (MATH reuses templates with other numbers). A problem counts as a copy when, after normalising (case,
LaTeX layout commands, punctuation), at least half of the shorter text's word 5-grams appear in the other.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable

SHINGLE_WORDS = 5
COPY_SHARE = 0.5
_LAYOUT = re.compile(r"\\(?:left|right|displaystyle|dfrac|tfrac|frac|mathrm|textbf|text|mbox|cdot|times|qquad|quad|,|;|!)")
_NOT_WORD = re.compile(r"[^\w]+")


def normalise(text: str) -> str:
    return " ".join(_NOT_WORD.sub(" ", _LAYOUT.sub(" ", text.casefold())).replace("_", " ").split())


def shingles(text: str) -> frozenset[str]:
    words = normalise(text).split()
    if len(words) < SHINGLE_WORDS:
        return frozenset([" ".join(words)])
    return frozenset(" ".join(words[i : i + SHINGLE_WORDS]) for i in range(len(words) - SHINGLE_WORDS + 1))


class CopyFinder:
    """An index of reference problems that says whether a text copies one of them."""

    def __init__(self, references: Iterable[str]) -> None:
        self._sizes: list[int] = []
        self._by_shingle: dict[str, list[int]] = defaultdict(list)
        for index, text in enumerate(references):
            grams = shingles(text)
            self._sizes.append(len(grams))
            for gram in grams:
                self._by_shingle[gram].append(index)

    def is_copy(self, text: str) -> bool:
        grams = shingles(text)
        shared = Counter(index for gram in grams for index in self._by_shingle.get(gram, ()))
        return any(count / min(len(grams), self._sizes[index]) >= COPY_SHARE for index, count in shared.items())
