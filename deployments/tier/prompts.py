"""Prompt normalisation for prefix-cache hits.

Clients drift in whitespace: a system prompt pasted with Windows line endings, trailing spaces, an extra blank line
in a few-shot block. Each drift is a different token sequence, so the prefix cache misses from that token on. What is
normalised here does not change what the text says: line endings, spaces at the ends of lines, runs of blank lines,
and whitespace around a message. Indentation and spaces inside a line are kept (code and tables depend on them), and
the last message, which no other request shares, is left as sent.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_BLANK_RUNS = re.compile(r"\n{3,}")


def normalize_text(text: str) -> str:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return _BLANK_RUNS.sub("\n\n", "\n".join(line.rstrip() for line in lines)).strip()


def normalize_messages(messages: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """Every message but the last with its whitespace normalised."""
    *shared, last = messages
    return [{**m, "content": normalize_text(m["content"])} for m in shared] + [dict(last)]
