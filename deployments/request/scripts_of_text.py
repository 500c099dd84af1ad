"""The writing system of a prompt, as a bounded metrics label (`script`): how the classifier's decisions split
across languages without a label per language, which no cheap detector gets right on a one-line prompt.

Letters are counted by their Unicode script (the first word of their Unicode name); the most common script names
the prompt. Japanese mixes kana with Han characters, so any prompt whose letters are at least a tenth kana is
`japanese`; Han without kana is `han` (Chinese).
"""

from __future__ import annotations

import unicodedata
from collections import Counter

SCRIPTS = ("latin", "cyrillic", "greek", "arabic", "hebrew", "indic", "thai", "han", "japanese", "hangul", "other",
           "none")
"""Every value the label takes."""
_BY_NAME = {
    "LATIN": "latin", "CYRILLIC": "cyrillic", "GREEK": "greek", "ARABIC": "arabic", "HEBREW": "hebrew",
    "THAI": "thai", "CJK": "han", "HIRAGANA": "japanese", "KATAKANA": "japanese", "HANGUL": "hangul",
    **dict.fromkeys(("DEVANAGARI", "BENGALI", "GURMUKHI", "GUJARATI", "ORIYA", "TAMIL", "TELUGU", "KANNADA",
                     "MALAYALAM", "SINHALA"), "indic"),
}
KANA_SHARE = 0.1
MAX_CHARS = 2000
"""Enough of a prompt to tell its script; long prompts are not read to the end."""


def _script(char: str) -> str:
    name = unicodedata.name(char, "")
    return _BY_NAME.get(name.split(" ", 1)[0], "other")


def script_of(text: str) -> str:
    """The prompt's writing system, one of SCRIPTS ("none" when it has no letters)."""
    counts = Counter(_script(c) for c in text[:MAX_CHARS] if c.isalpha())
    letters = sum(counts.values())
    if not letters:
        return "none"
    if counts["japanese"] >= KANA_SHARE * letters:
        return "japanese"
    return counts.most_common(1)[0][0]
