"""Trains the reasoner from scratch, seeded, and saves a Hugging Face folder that vLLM loads.

Batches hold examples of one step-count bucket, so their lengths are alike and padding costs little; each batch holds
about `tokens_per_step` tokens. Loss is taken on the learned tokens only (traces.py says which). Progress (loss,
tokens per second, time left) is logged every `log_every` steps.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from thinktier.training.reasoner.corpus import Example, build_tokenizer, examples
from thinktier.training.reasoner.prefetch import prefetched
from thinktier.training.reasoner.sizes import ReasonerSize
from thinktier.training.reasoner.traces import TraceSettings

log = logging.getLogger(__name__)
IGNORE = -100
BUCKET_STEPS = 4
"""Step counts per length bucket."""


@dataclass(frozen=True)
class TrainingOptions:
    seed: int = 0
    steps: int | None = None
    """Optimizer steps; None takes the size's."""
    device: str = "cpu"
    max_minutes: float | None = None
    """A cap on training time: the learning-rate schedule then follows the larger of step and time progress, so a run
    cut by the cap still ends annealed (and is no longer step-for-step reproducible)."""
    init_from: Path | None = None
    """Continue from this saved model folder (its weights and tokenizer) instead of starting from scratch."""
    learning_rate: float | None = None
    """Peak learning rate; None takes the size's."""
    log_every: int = 25


def model_config(size: ReasonerSize, tokenizer: Any) -> Any:
    """A Llama decoder with biases on its attention projections (Qwen2's shape, as the first models were trained).

    Not Qwen2 itself: for a `qwen2` model, transformers' AutoTokenizer (and so vLLM) swaps the saved tokenizer's
    pre-tokenizer for Qwen2's, which splits numbers into digits; the model then reads prompts differently from how it
    was trained. For `llama` it loads the tokenizer as saved."""
    from transformers import LlamaConfig

    shape = size.shape
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        attention_bias=True,
        rms_norm_eps=1e-6,
        max_position_embeddings=shape.context,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        dtype="float32",
    )


def batches(stream: Iterator[tuple[int, Example]], tokens_per_step: int, seed: int) -> Iterator[list[Example]]:
    """Batches of about `tokens_per_step` tokens from one bucket of step counts at a time."""
    rng = random.Random(seed)
    pending: dict[int, list[Example]] = {}
    for count, example in stream:
        bucket = pending.setdefault(count // BUCKET_STEPS, [])
        bucket.append(example)
        longest = max(len(e.ids) for e in bucket)
        if longest * (len(bucket) + 1) > tokens_per_step:
            rng.shuffle(bucket)
            yield bucket
            pending[count // BUCKET_STEPS] = []


def tensors(batch: list[Example], pad_id: int, device: str) -> tuple[Any, Any]:
    """Token ids and labels (-100 where not learned) of a batch, padded on the right.

    The model is called without an attention mask: attention is causal, so a real token never sees the padding after it, and
    with no mask attention runs as one causal kernel (flash attention on a GPU) instead of a masked one (1.5x per
    step on the CPU for the large size; the loss is the same to the last digit)."""
    import torch

    width = max(len(e.ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    for row, example in enumerate(batch):
        n = len(example.ids)
        ids[row, :n] = torch.tensor(example.ids)
        learned = torch.tensor(example.learned)
        labels[row, :n] = torch.where(learned, ids[row, :n], IGNORE)
    return ids.to(device), labels.to(device)


def bf16_fast(device: str) -> bool:
    """Whether bfloat16 autocast speeds training up here: on a GPU, and on CPUs with AVX-512 BF16 or AMX (1.7x on
    this project's 2-core machines); elsewhere bfloat16 is emulated and slower than float32."""
    if device.startswith("cuda"):
        return True
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def learning_rate(step: int, size: ReasonerSize, progress: float) -> float:
    """Linear warm-up, then cosine from the peak to a tenth of it as `progress` goes from 0 to 1."""
    run = size.run
    if step < run.warmup_steps:
        return run.learning_rate * (step + 1) / run.warmup_steps
    return run.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def train(size: ReasonerSize, dest: Path, options: TrainingOptions) -> dict[str, Any]:
    """Trains one size and saves it in `dest`; returns the run's record (also saved as thinktier-training.json)."""
    import torch
    from transformers import LlamaForCausalLM

    random.seed(options.seed)
    torch.manual_seed(options.seed)
    if options.init_from is None:
        tokenizer = build_tokenizer(options.seed)
        model: Any = LlamaForCausalLM(model_config(size, tokenizer))
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(options.init_from)
        model = LlamaForCausalLM.from_pretrained(options.init_from)
    size = replace(size, run=replace(size.run, learning_rate=options.learning_rate or size.run.learning_rate))

    def make_batches() -> Iterator[list[Example]]:
        stream = examples(tokenizer, size.difficulty, options.seed, size.run.mix,
                          TraceSettings(slip_rate=size.run.slip_rate, restate_result=size.run.restate_result),
                          size.run.max_count)
        return batches(stream, size.run.tokens_per_step, options.seed)

    feed = prefetched(make_batches)
    model.to(options.device)
    steps = options.steps or size.run.steps
    optimizer = torch.optim.AdamW(model.parameters(), lr=size.run.learning_rate, betas=(0.9, 0.98), weight_decay=0.01)
    autocast = torch.autocast(torch.device(options.device).type, dtype=torch.bfloat16) if bf16_fast(options.device) else None
    started = time.monotonic()
    seen_tokens = 0
    losses: list[float] = []
    cap_s = None if options.max_minutes is None else 60 * options.max_minutes
    for step, batch in zip(range(steps), feed, strict=False):
        progress = step / steps if cap_s is None else max(step / steps, (time.monotonic() - started) / cap_s)
        if progress >= 1:
            log.info("stopped at step %d of %d: the %.1f-minute cap", step, steps, options.max_minutes)
            break
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, size, progress)
        ids, labels = tensors(batch, tokenizer.pad_token_id, options.device)
        if autocast is None:
            loss = model(input_ids=ids, labels=labels).loss
        else:
            with autocast:
                loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seen_tokens += sum(len(e.ids) for e in batch)
        losses.append(loss.item())
        if (step + 1) % options.log_every == 0 or step + 1 == steps:
            elapsed = time.monotonic() - started
            recent = sum(losses[-options.log_every:]) / len(losses[-options.log_every:])
            log.info("step %d/%d  loss %.4f  %.0f tokens/s  %.0f s elapsed, %.0f s left", step + 1, steps, recent,
                     seen_tokens / elapsed, elapsed, elapsed / (step + 1) * (steps - step - 1))
    feed.close()
    record = {
        "size": size.name, "seed": options.seed, "steps": len(losses), "device": options.device,
        "init_from": None if options.init_from is None else str(options.init_from),
        "tokens": seen_tokens, "seconds": round(time.monotonic() - started, 1),
        "final_loss": sum(losses[-50:]) / len(losses[-50:]),
        "shape": asdict(size.shape), "difficulty": asdict(size.difficulty), "run": asdict(size.run),
    }
    dest.mkdir(parents=True, exist_ok=True)
    model.to("cpu").save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)
    (dest / "thinktier-training.json").write_text(json.dumps(record, indent=2) + "\n")
    return record
