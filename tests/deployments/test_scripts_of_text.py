"""The writing-system label of the classifier's decision counts: bounded, and right on everyday prompts."""

from __future__ import annotations

import pytest

from thinktier.deployments.request.scripts_of_text import SCRIPTS, script_of
from thinktier.training.data.chat_prompts import CHAT_PROMPTS

EXPECTED = {"en": "latin", "es": "latin", "fr": "latin", "pt": "latin", "vi": "latin", "zh": "han", "ja": "japanese",
            "ko": "hangul", "ar": "arabic", "th": "thai"}


@pytest.mark.parametrize("language", sorted(EXPECTED))
def test_every_chat_prompt_of_a_language_gets_its_script(language: str) -> None:
    prompts = [p for kind in CHAT_PROMPTS[language].values() for p in kind]
    assert prompts
    assert {script_of(p) for p in prompts} == {EXPECTED[language]}


def test_mixed_and_letterless_prompts_get_a_label_from_the_bounded_set() -> None:
    assert script_of("x² + 3 = 7, find x (用中文回答)") == "latin"  # the most common script of the letters
    assert script_of("今日は東京へ行きます") == "japanese"  # kana beside Han characters
    assert script_of("12 + 7 = ?") == "none"
    assert script_of("Привет, как дела?") == "cyrillic" and script_of("नमस्ते") == "indic"
    assert {script_of(t) for t in ("ᚠᚢᚦ", "😀 ok", "")} <= set(SCRIPTS)
