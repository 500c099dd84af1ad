"""Thinking delimiters come from vLLM's reasoning parser that the tier names, as tokens of the engine's tokenizer; a
model whose tokenizer cuts a delimiter into pieces is refused when its engine starts, with what to do about it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from vllm.tokenizers import TokenizerLike

from tests.conftest import TINY_POLICY
from thinktier.deployments.tier.engine import TierEngine, engine_kwargs
from thinktier.deployments.tier.models import resolve_model
from thinktier.deployments.tier.reasoning_delimiters import UnfitDelimiters, engine_tokenizer, thinking_delimiters
from thinktier.deployments.tier.thinking import ThinkingDelimiters
from thinktier.policies.loader import PolicyError, load_policy, parse_policy
from thinktier.policies.schema import Tier

FIX = "or name the parser that matches the model (deepseek_r1 for <think>...</think>)"


def tiny_tier(model: str = "builtin:tiny-random", reasoning_parser: str = "deepseek_r1") -> Tier:
    tier = load_policy(TINY_POLICY).tiers["reasoning"]
    return tier.model_copy(update={"model": model, "reasoning_parser": reasoning_parser})


def tokenizer_of(model: str) -> TokenizerLike:
    """The tokenizer the tiny tier's engine would use with `model`."""
    return engine_tokenizer(engine_kwargs(tiny_tier(model), resolve_model(model)))


def model_without_end_token(dest: Path, in_vocabulary: bool) -> Path:
    """The tiny test model with a tokenizer in which "</think>" is not a token of its own: a plain string of the
    vocabulary that encoding never produces (`in_vocabulary`), or not in the vocabulary at all."""
    shutil.copytree(resolve_model("builtin:tiny-random"), dest)
    tokenizer = json.loads((dest / "tokenizer.json").read_text())
    tokenizer["added_tokens"] = [t for t in tokenizer["added_tokens"] if t["content"] != "</think>"]
    if not in_vocabulary:
        vocab = tokenizer["model"]["vocab"]
        vocab["<unused>"] = vocab.pop("</think>")
    (dest / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = json.loads((dest / "tokenizer_config.json").read_text())
    config["extra_special_tokens"] = ["<think>"]
    (dest / "tokenizer_config.json").write_text(json.dumps(config))
    return dest


def test_the_tiny_models_delimiters_come_from_the_parser_as_single_tokens() -> None:
    tokenizer = tokenizer_of("builtin:tiny-random")
    ids = tokenizer.get_vocab()
    expected = ThinkingDelimiters(start="<think>", end="</think>", start_id=ids["<think>"], end_id=ids["</think>"])
    assert thinking_delimiters("deepseek_r1", tokenizer, "builtin:tiny-random") == expected
    assert thinking_delimiters("qwen3", tokenizer, "builtin:tiny-random") == expected  # another parser, same tokens


def test_a_delimiter_the_tokenizer_cuts_into_pieces_is_refused_with_the_fix(tmp_path: Path) -> None:
    model = str(model_without_end_token(tmp_path / "model", in_vocabulary=True))
    with pytest.raises(UnfitDelimiters) as err:
        thinking_delimiters("deepseek_r1", tokenizer_of(model), model, "tiers.reasoning.reasoning_parser")
    message = str(err.value)
    assert message.startswith(
        f"tiers.reasoning.reasoning_parser: the thinking delimiters of vLLM reasoning parser 'deepseek_r1' must each be "
        f"one token of the tokenizer of {model!r}, and '</think>' is "
    )
    assert "'<think>' is" not in message  # the start token is still one token
    assert "Add them to the tokenizer as special tokens (tokenizer.add_special_tokens({'additional_special_tokens': " \
        "['<think>', '</think>']}), then resize the model's token embeddings), " + FIX in message


def test_a_delimiter_missing_from_the_vocabulary_is_refused_naming_it(tmp_path: Path) -> None:
    """vLLM's own parser refuses this tokenizer when it is built, without saying which token it missed."""
    model = str(model_without_end_token(tmp_path / "model", in_vocabulary=False))
    with pytest.raises(UnfitDelimiters, match=r"and '</think>' is \d+ tokens: \['<', '/'"):
        thinking_delimiters("deepseek_r1", tokenizer_of(model), model)


def test_a_parser_that_does_not_match_the_model_is_refused() -> None:
    with pytest.raises(UnfitDelimiters) as err:
        thinking_delimiters("seed_oss", tokenizer_of("builtin:tiny-random"), "builtin:tiny-random")
    message = str(err.value)
    assert "vLLM reasoning parser 'seed_oss' must each be one token" in message
    assert "'<seed:think>' is" in message and "'</seed:think>' is" in message and message.endswith(FIX)


def test_an_unknown_parser_is_refused_with_vllms_parsers() -> None:
    with pytest.raises(UnfitDelimiters, match=r"^reasoning_parser: 'r1' is not a vLLM reasoning parser; vLLM has .*"
                                              r"deepseek_r1, .*qwen3"):
        thinking_delimiters("r1", tokenizer_of("builtin:tiny-random"), "builtin:tiny-random")


def test_a_parser_without_delimiters_is_refused() -> None:
    with pytest.raises(UnfitDelimiters, match="'granite' has no start or end string of a thinking section"):
        thinking_delimiters("granite", tokenizer_of("builtin:tiny-random"), "builtin:tiny-random")


def test_the_engine_refuses_a_model_whose_delimiters_are_not_single_tokens_before_it_loads(tmp_path: Path) -> None:
    model = str(model_without_end_token(tmp_path / "model", in_vocabulary=True))
    with pytest.raises(UnfitDelimiters, match=r"^tiers\.reasoning\.reasoning_parser: the thinking delimiters of vLLM "
                                              r"reasoning parser 'deepseek_r1' must each be one token"):
        TierEngine("reasoning", tiny_tier(model))


def test_a_policy_of_before_reasoning_parser_loads_when_it_named_the_default_parsers_delimiters() -> None:
    text = TINY_POLICY.read_text()
    served = "    served_model_name: tiny-reasoning\n"
    old = parse_policy(text.replace(served, served + "    think_start: <think>\n    think_end: </think>\n", 1))
    assert old == parse_policy(text)
    with pytest.raises(PolicyError) as err:
        parse_policy(text.replace(served, served + "    think_end: </seed:think>\n", 1))
    assert "tiers.reasoning.think_end: the thinking delimiters come from the tier's reasoning_parser" in str(err.value)
