"""Language-neutral structure of a prompt: how much mathematics it holds, counted the same way in every script.

Digits, numbers, LaTeX commands, `$`, operators, relations, brackets, one-letter variables, sentences and the length in
tokens of a multilingual tokenizer read alike whatever language the words around them are in, so a head trained on
them transfers across languages where word n-grams cannot (difficulty-v4). Counts are log(1 + count); the artifact
stores the training rows' mean and spread of each, and the model standardises with them.
"""

from __future__ import annotations

import math
import re
import unicodedata

import numpy as np

_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
# (name, pattern): each feature is log(1 + number of matches) in the NFKC-normalised prompt.
_COUNTED: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("digits", re.compile(r"\d")),
    ("numbers", _NUMBER),
    ("latex_commands", re.compile(r"\\[a-zA-Z]+")),
    ("dollars", re.compile(r"\$")),
    ("fractions_roots_binomials", re.compile(r"\\frac|\\dfrac|\\sqrt|\\binom")),
    ("super_subscripts", re.compile(r"[\^_]")),
    ("equals", re.compile(r"=")),
    ("inequalities", re.compile(r"[<>≤≥]|\\le|\\ge|\\leq|\\geq")),
    ("operators", re.compile(r"[+\-*/\u00d7\u00f7\u00b7]|\\cdot|\\times")),
    ("brackets", re.compile(r"[()\[\]{}]")),
    ("one_letter_variables", re.compile(r"(?<![A-Za-z])[A-Za-z](?![A-Za-z])")),
    ("newlines", re.compile(r"\n")),
    ("question_marks", re.compile(r"[?\uff1f]")),
    ("sentence_ends", re.compile(r"[.!?\u3002\uff01\uff1f]")),
)
STRUCTURE_FEATURES: tuple[str, ...] = (
    *(name for name, _ in _COUNTED),
    "longest_number_digits",
    "distinct_numbers",
    "tokens",
    "characters",
    "symbol_share",
)


def structure(text: str, tokens: int) -> np.ndarray:
    """The raw (unstandardised) features of `text`, in the order of STRUCTURE_FEATURES; `tokens` is its length in tokens
    of the multilingual tokenizer."""
    text = unicodedata.normalize("NFKC", text)
    numbers = _NUMBER.findall(text)
    symbols = sum(1 for ch in text if not ch.isalpha() and not ch.isspace())
    row = [math.log1p(len(pattern.findall(text))) for _, pattern in _COUNTED]
    row += [
        math.log1p(max((len(n) for n in numbers), default=0)),
        math.log1p(len(set(numbers))),
        math.log1p(tokens),
        math.log1p(len(text)),
        symbols / max(1, len(text)),
    ]
    return np.asarray(row, dtype=np.float32)


def standardiser(rows: np.ndarray) -> tuple[list[float], list[float]]:
    """(mean, scale) per feature of the training rows. The scale is the spread times sqrt(feature count), so the
    standardised block has an L2 norm near 1, like the embedding's, and the spec's weight alone sets its pull."""
    spread = rows.std(axis=0) + 1e-6
    return rows.mean(axis=0).tolist(), (spread * math.sqrt(rows.shape[1])).tolist()
