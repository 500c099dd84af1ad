"""The reasoner's tokenizer and its training examples as token ids with a learned-or-not mask per token.

The tokenizer is a byte-level BPE trained on the task family's own text, with numbers of up to three digits kept
whole (as GPT-4's and Llama 3's tokenizers group digits; every value 0-99, written with one or two digits, is one token),
ChatML's turn markers, and `<think>`/`</think>` as single special tokens, so vLLM's
`deepseek_r1` reasoning parser and the tier's thinking budget work on it unchanged.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from thinktier.deployments.tier.models import CHATML_TEMPLATE, THINK_TOKENS
from thinktier.training.reasoner.tasks import LANGUAGES, Difficulty, sample_chat, sample_problem
from thinktier.training.reasoner.traces import (
    CLOSE,
    PROBE,
    Document,
    ProblemTrace,
    TraceSettings,
    chat_document,
    chat_template,
    full_document,
    off_document,
    problem_trace,
)

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", *THINK_TOKENS)
VOCAB_SIZE = 1024
SHORT_CHAIN = 4
NUMBER = r"\d{1,3}"
"""How digits are grouped into tokens. Whole numbers make a copy one token (a model that copies digit by digit, as
the first version of this tokenizer made it, copied the first digit of a number and lost the second), and the column
sums a lookup of the number's digits."""


def build_tokenizer(seed: int, documents: int = 600) -> Any:
    """A PreTrainedTokenizerFast trained on seeded documents of every shape and language."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(seed)
    texts = [PROBE]
    for i in range(documents):
        if i % 4 == 0:
            doc = chat_document(sample_chat(rng, LANGUAGES[i % 3]), thinking=i % 8 == 0)
        else:
            problem = sample_problem(rng, rng.randint(1, 12), LANGUAGES[i % 3])
            doc = full_document(problem_trace(problem, rng, TraceSettings()))
        texts.append("".join(s.text for s in doc.segments))
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(NUMBER), behavior="isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=list(THINK_TOKENS),
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


@dataclass
class Example:
    ids: list[int]
    learned: list[bool]


@dataclass(frozen=True)
class CorpusMix:
    """Shares of each kind of example; the rest are problems worked in full."""

    chat: float = 0.06
    off: float = 0.12
    off_one_step: float = 0.6
    """Share of the thinking-off examples that are one-step problems: the only ones a model can answer without
    thinking (traces.off_answer writes their column sums); they are short, so this costs under 1 % of the tokens."""
    cut: float = 0.15
    probe: float = 0.15
    short_chains: float = 0.0
    """Share of problem draws whose step count is drawn from 1 to `SHORT_CHAIN` instead of 1 to the size's longest: with
    chains up to 125 steps, one- and two-step chains are 1.6 % of uniform draws, too few for the model to learn where
    they end."""
    learn_after_forced_close: bool = False
    """In a cut example, learn the blank line after `</think>` with the answer. At a forced end the budget processor
    writes `</think>` alone, so the model writes what follows it; unlearned, that line is only ever seen after a
    complete line of thinking, never after a cut one. The small size was trained without it."""


class ExampleEncoder:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def _ids(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=False)
        return ids

    def document(self, doc: Document) -> Example:
        example = Example([], [])
        for segment in doc.segments:
            ids = self._ids(segment.text)
            example.ids += ids
            example.learned += [segment.learned] * len(ids)
        return example

    def cut(self, trace: ProblemTrace, rng: random.Random, probe: bool, learn_after_close: bool = False) -> Example:
        """A problem's thinking closed (or probed) after a random number of its tokens; with `learn_after_close`, only
        the closing tag is unlearned (what a budget processor forces), not the blank line after it."""
        example = Example(self._ids(chat_template(trace.problem.prompt)), [])
        example.learned = [False] * len(example.ids)
        opening = self._ids("<think>\n")
        example.ids += opening
        example.learned += [True] * len(opening)
        line_ids = [self._ids(line.text) for line in trace.lines]
        total = sum(len(ids) for ids in line_ids)
        cut = rng.randrange(total)
        done = 0
        for index, ids in enumerate(line_ids):
            if done + len(ids) > cut:
                example.ids += ids[: cut - done]
                example.learned += [True] * (cut - done)
                best = trace.best_after(index)
                break
            example.ids += ids
            example.learned += [True] * len(ids)
            done += len(ids)
        if probe:
            tail = self._ids(PROBE)
            answer = self._ids(f"{best}}} \\]<|im_end|>")
        else:
            forced = CLOSE.rstrip() if learn_after_close else CLOSE
            tail = self._ids(forced)
            answer = self._ids(CLOSE[len(forced):] + trace.problem.answer_text(best) + "<|im_end|>")
        example.ids += tail + answer
        example.learned += [False] * len(tail) + [True] * len(answer)
        return example


def examples(tokenizer: Any, difficulty: Difficulty, seed: int, mix: CorpusMix, settings: TraceSettings,
             max_count: int) -> Iterator[tuple[int, Example]]:
    """Endless seeded examples, each with the step count it was drawn for (0 for chat), for length bucketing."""
    rng = random.Random(seed)
    encoder = ExampleEncoder(tokenizer)
    while True:
        draw = rng.random()
        if draw < mix.chat:
            yield 0, encoder.document(chat_document(sample_chat(rng), thinking=rng.random() < 0.5))
            continue
        short = mix.short_chains > 0 and rng.random() < mix.short_chains  # no draw at 0: the small's stream as trained
        count = rng.randint(1, SHORT_CHAIN if short else max_count)
        problem = sample_problem(rng, count)
        draw -= mix.chat
        if draw < mix.off:
            if rng.random() < mix.off_one_step:
                count = 1
                problem = sample_problem(rng, count)
            yield count, encoder.document(off_document(problem))
            continue
        trace = problem_trace(problem, rng, settings)
        draw -= mix.off
        if draw < mix.cut + mix.probe:
            yield count, encoder.cut(trace, rng, probe=draw >= mix.cut, learn_after_close=mix.learn_after_forced_close)
        else:
            yield count, encoder.document(full_document(trace))
