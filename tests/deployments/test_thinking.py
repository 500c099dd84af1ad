"""The thinking logic without vLLM: prompt opening, budget arithmetic, the reasoning/answer split."""

from __future__ import annotations

from thinktier.deployments.tier.thinking import (
    NO_THINKING,
    THINKING_BUDGET_ARG,
    ReasoningSplitter,
    ThinkingTokens,
    decode_limits,
    open_section,
)

TOKENS = ThinkingTokens(open_ids=(90, 10), close_ids=(91, 10, 10), end_id=91)
"""'<think>' is 90, '</think>' 91, a newline 10."""


def text(ids: list[int] | tuple[int, ...]) -> str:
    return " ".join(str(i) for i in ids)


def test_a_thinking_prompt_is_opened_once_and_closed_at_once_with_no_budget() -> None:
    assert open_section([1, 2], TOKENS, already_open=False, thinking_budget=8) == [1, 2, 90, 10]
    assert open_section([1, 2, 90, 10], TOKENS, already_open=True, thinking_budget=8) == [1, 2, 90, 10]
    assert open_section([1, 2], TOKENS, already_open=False, thinking_budget=0) == [1, 2, 90, 10, 91, 10, 10]


def test_budgets_become_sampler_limits() -> None:
    thinking = decode_limits(thinking_tokens=100, answer_tokens=50, thinking=True, open_len=2)
    assert thinking.max_tokens == 151  # the end token is one more output token
    # the project's processor forces the whole close: the end token and the blank line after it
    assert thinking.sampler_args("thinktier", TOKENS) == {
        "extra_args": {THINKING_BUDGET_ARG: {"tokens": 100, "close_ids": [91, 10, 10]}}}
    # vLLM counts the prompt's newline after the start token towards its own budget
    assert thinking.sampler_args("vllm", TOKENS) == {"thinking_token_budget": 101}
    answer = decode_limits(thinking_tokens=100, answer_tokens=50, thinking=False, open_len=2)
    assert (answer.max_tokens, answer.sampler_args("thinktier", TOKENS), answer.sampler_args("vllm", TOKENS)) == (50, {}, {})
    assert thinking.sampler_args("thinktier", NO_THINKING) == {}
    assert decode_limits(0, 50, False, 2, room=20).max_tokens == 20


def test_the_end_token_splits_reasoning_from_answer_within_one_delta() -> None:
    split = ReasoningSplitter(in_thinking=True, end_id=91, thinking_budget=3, answer_budget=10)
    first = split.feed([5, 6], "5 6", text, 0.1, finished=False, finish_reason=None)
    assert (first.reasoning, first.content) == ("5 6", "")
    both = split.feed([7, 91, 8], "7 </think> 8", text, 0.2, finished=False, finish_reason=None)
    assert (both.reasoning, both.content) == ("7", "8")
    assert (split.reasoning_tokens, split.answer_tokens, split.budget_forced) == (3, 1, True)
    assert (split.first_token_s, split.first_visible_s) == (0.1, 0.2)
    split.feed([9], "9", text, 0.3, finished=True, finish_reason="stop")
    totals = split.totals(prompt_tokens=4)
    assert (totals.finish_reason, totals.reasoning_tokens, totals.answer_tokens, totals.prompt_tokens) == ("stop", 3, 2, 4)


def test_the_answer_is_cut_at_its_budget() -> None:
    split = ReasoningSplitter(in_thinking=False, end_id=None, thinking_budget=0, answer_budget=3)
    split.feed([1, 2], "1 2", text, 0.0, finished=False, finish_reason=None)
    assert split.finish is None
    split.feed([3], "3", text, 0.1, finished=False, finish_reason=None)
    assert split.finish == "length"


def test_a_model_that_stops_inside_the_section_gets_it_closed_and_answers_in_a_second_decode() -> None:
    split = ReasoningSplitter(in_thinking=True, end_id=91, thinking_budget=50, answer_budget=10)
    split.feed([5, 6], "5 6", text, 0.1, finished=True, finish_reason="stop")
    assert split.ended_in_thinking
    assert split.answer_after_thinking([1, 90, 10], TOKENS) == [1, 90, 10, 5, 6, 91, 10, 10]
    assert not split.ended_in_thinking and split.finish is None
    answer = split.feed([8], "8", text, 0.2, finished=True, finish_reason="stop")
    assert answer.content == "8" and split.totals(3).reasoning_tokens == 2


def test_an_output_carrying_tokens_past_the_answer_budget_is_cut_at_the_budget() -> None:
    """The engine merges the deltas its consumer has not taken yet, so one output can run past the budget."""
    split = ReasoningSplitter(True, TOKENS.end_id, thinking_budget=8, answer_budget=3)
    chunk = split.feed([1, 2, 91, 10, 11, 12, 13, 14], "", text, 0.1, False, None)
    assert (chunk.reasoning, chunk.content) == (text([1, 2]), text([10, 11, 12]))
    assert (split.answer_tokens, split.finish) == (3, "length")
    split = ReasoningSplitter(False, None, thinking_budget=0, answer_budget=2)
    assert split.feed([5, 6, 7], "whole text", text, 0.1, False, None).content == text([5, 6])
    assert split.feed([8], "x", text, 0.2, False, None).content == ""
