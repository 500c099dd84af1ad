"""The reasoner's training loop: seeded, and what it saves is a model folder that loads and writes its own thinking."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from thinktier.training.reasoner.sizes import SIZES
from thinktier.training.reasoner.train import TrainingOptions, train

SMALL = replace(SIZES["small"], run=replace(SIZES["small"].run, tokens_per_step=2048))
"""The small size in batches of about 2,048 tokens instead of 32,768: nothing these tests check depends on the batch,
and a full one takes about a minute a step on two cores."""


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("reasoner")
    folders = (root / "a", root / "b", root / "c")
    for folder, seed in zip(folders, (0, 0, 1), strict=True):
        train(SMALL, folder, TrainingOptions(seed=seed, steps=2, log_every=1))
    return folders


def test_same_seed_gives_the_same_model_and_another_seed_another(two_runs: tuple[Path, Path, Path]) -> None:
    weights = [(folder / "model.safetensors").read_bytes() for folder in two_runs]
    assert weights[0] == weights[1]
    assert weights[0] != weights[2]
    record = json.loads((two_runs[0] / "thinktier-training.json").read_text())
    assert record["seed"] == 0 and record["steps"] == 2 and record["tokens"] > 0


def test_the_saved_folder_loads_with_its_tokenizer_and_chat_template(two_runs: tuple[Path, Path, Path]) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = two_runs[0]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config.architectures == ["LlamaForCausalLM"]
    assert model.config.hidden_size // model.config.num_attention_heads == 32  # vLLM's CPU attention takes 32 or 64
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi!"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
    for delimiter in ("<think>", "</think>"):
        assert len(tokenizer.encode(delimiter, add_special_tokens=False)) == 1  # the reasoning parser needs one token
    # Loaded as vLLM loads it, the tokenizer keeps numbers whole, as in training (a qwen2 model's would split them)
    assert [tokenizer.decode([i]) for i in tokenizer.encode("at 79, 05", add_special_tokens=False)] == [
        "at", " ", "79", ",", " ", "05"]
