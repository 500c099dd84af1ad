"""The thinking delimiters of a tier's model, from vLLM's reasoning parser for it.

A tier names the vLLM reasoning parser of its model (`reasoning_parser` in the policy: deepseek_r1, qwen3, ...), which
knows the strings that open and close its thinking section. thinktier works on token ids from there: it splits the
output at the end token and forces that token at the budget (deployments/tier/thinking_budget.py), so each delimiter
must be one token of the model's tokenizer. A tokenizer that cuts one into pieces would let the thinking run past its
budget and never split the answer off, so `thinking_delimiters` refuses it when the engine starts, saying what to do.

Only what vLLM 0.24 and 0.32 both have is used: `ReasoningParserManager.get_reasoning_parser(name)`, a parser built
on the tokenizer, its `reasoning_start_str` and `reasoning_end_str`, and `cached_tokenizer_from_config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.reasoning import ReasoningParser, ReasoningParserManager
from vllm.tokenizers import TokenizerLike, cached_tokenizer_from_config

from thinktier.deployments.tier.thinking import ThinkingDelimiters

FIX = "or name the parser that matches the model (deepseek_r1 for <think>...</think>)"


class UnfitDelimiters(ValueError):
    """The tier's reasoning parser does not fit its model's tokenizer; the message says what to change."""


def engine_tokenizer(engine_args: Mapping[str, Any]) -> TokenizerLike:
    """The tokenizer that an engine of these AsyncEngineArgs keyword arguments will use, read without starting it."""
    tokenizer: TokenizerLike = cached_tokenizer_from_config(AsyncEngineArgs(**engine_args).create_model_config())
    return tokenizer


def thinking_delimiters(
    parser_name: str, tokenizer: TokenizerLike, model: str, setting: str = "reasoning_parser"
) -> ThinkingDelimiters:
    """The delimiters of vLLM reasoning parser `parser_name` as tokens of `tokenizer` (the tokenizer of `model`).
    `setting` is where the policy names the parser, for the messages."""
    parser = _parser_class(parser_name, setting)
    start, end = _delimiter_strings(parser, tokenizer, f"{setting}: vLLM reasoning parser {parser_name!r}", model)
    if not start or not end:
        raise UnfitDelimiters(
            f"{setting}: vLLM reasoning parser {parser_name!r} has no start or end string of a thinking section "
            f"(start {start!r}, end {end!r}), which thinktier needs to open and close it; {FIX.removeprefix('or ')}"
        )
    ids = {text: tokenizer.encode(text, add_special_tokens=False) for text in (start, end)}
    split = {text: pieces for text, pieces in ids.items() if len(pieces) != 1}
    if split:
        cut = "; ".join(f"{text!r} is {len(p)} tokens: {[tokenizer.decode([i]) for i in p]}" for text, p in split.items())
        raise UnfitDelimiters(
            f"{setting}: the thinking delimiters of vLLM reasoning parser {parser_name!r} must each be one token of the "
            f"tokenizer of {model!r}, and {cut}. Add them to the tokenizer as special tokens "
            f"(tokenizer.add_special_tokens({{'additional_special_tokens': [{start!r}, {end!r}]}}), then resize the "
            f"model's token embeddings), {FIX}"
        )
    return ThinkingDelimiters(start=start, end=end, start_id=ids[start][0], end_id=ids[end][0])


def _parser_class(name: str, setting: str) -> type[ReasoningParser]:
    try:
        return ReasoningParserManager.get_reasoning_parser(name)
    except KeyError:
        known = ", ".join(ReasoningParserManager.list_registered())
        raise UnfitDelimiters(f"{setting}: {name!r} is not a vLLM reasoning parser; vLLM has {known}") from None


def _delimiter_strings(
    parser: type[ReasoningParser], tokenizer: TokenizerLike, what: str, model: str
) -> tuple[str | None, str | None]:
    """The parser's start and end strings. vLLM's BaseThinkingReasoningParser refuses, when it is built, a tokenizer that
    lacks its tokens; its strings are constants of its class, read then from an instance that skipped the constructor,
    so that the refusal names them."""
    try:
        built = parser(tokenizer)
    except Exception as refused:  # any parser's constructor, with any complaint about this tokenizer
        unbuilt = object.__new__(parser)
        try:
            return unbuilt.reasoning_start_str, unbuilt.reasoning_end_str
        except AttributeError:  # strings that the constructor derives: the refusal is all there is to say
            raise UnfitDelimiters(
                f"{what} cannot read the tokenizer of {model!r} ({refused}); add the parser's delimiters to the "
                f"tokenizer as special tokens, {FIX}"
            ) from refused
    return built.reasoning_start_str, built.reasoning_end_str
