"""A vLLM logits processor that ends a request's thinking section at its budget, at O(1) cost per sequence and step.

vLLM's own `thinking_token_budget` (0.24) rescans a request's whole output for the end token on every step until the
section ends: Python work of O(output length) per sequence, between the forward pass and sampling. At 60 sequences
of ~1,500 thinking tokens that is several milliseconds a step (about 100 ns per token on this project's CPUs), which
is what held the served GPU engines at 100 % CPU with the GPU a third idle (loadtest/results/gpu-fullstack/). This
processor looks only at the tokens added since its last look.

A request opts in through `SamplingParams.extra_args[THINKING_BUDGET_ARG]` = {"tokens": N, "close_ids": [END, ...]}
(`DecodeLimits.sampler_args` in deployments/tier/thinking.py): the prompt has opened the section, and once N tokens
are out without the end token, the next ones are forced to be the close: the end token, then what the model writes
after a section it ends itself (a blank line). A model cut mid-line and given the end token alone may go on thinking
in its answer ("Let me check..."): the project's reasoner did so on 1 of 114 cut sections before the close was forced
whole. Requests without the argument are left alone. Speculative decoding is not supported (tiers do not use it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from thinktier.deployments.tier.thinking import THINKING_BUDGET_ARG

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.config import VllmConfig

PLACEHOLDER = -1
"""What vLLM's async scheduling holds in an output list for a token sampled but not yet copied back."""


@dataclass
class _Section:
    tokens: int
    close_ids: tuple[int, ...]
    """The end token, then the tokens that follow it when the section is closed at its budget."""
    output: list[int]
    """vLLM's live output list of the request: it grows in place step by step."""
    seen: int = 0
    """Tokens of `output` already looked at for the end token."""
    forced_at: int | None = None
    """Where in `output` the forced end token goes: counted by position, since under async scheduling the tokens
    forced last step are still placeholders."""
    closed: bool = False
    """The section is over: the model ended it, or the whole forced close is out; nothing more to force."""

    def ended(self) -> bool:
        """Whether the model wrote the end token among the tokens added since the last look (which then moves on)."""
        output = self.output
        new = len(output)
        while new > self.seen and output[new - 1] == PLACEHOLDER:
            new -= 1
        closed = self.close_ids[0] in output[self.seen:new]
        self.seen = new
        return closed

    def next_forced(self) -> int | None:
        """The token the next step must be: the close's next token once the budget is spent; None while the model
        thinks within it, and once the section is `closed`."""
        if self.forced_at is None:
            self.closed = self.ended()
            if self.closed or self.seen < self.tokens:
                return None
            self.forced_at = len(self.output)
        output, at = self.output, self.forced_at
        if at < len(output) and output[at] not in (PLACEHOLDER, self.close_ids[0]):
            self.forced_at = at = len(output)  # the end token was not taken (another processor's choice): again
        written = len(output) - at
        self.closed = written >= len(self.close_ids)
        return None if self.closed else self.close_ids[written]


class ThinkingBudgetProcessor(LogitsProcessor):
    """Forces the close of the thinking section once a request has spent its budget (see the module docstring)."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        self._sections: dict[int, _Section] = {}

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        arg = (sampling_params.extra_args or {}).get(THINKING_BUDGET_ARG)
        if arg is None:
            return
        tokens, close = (arg.get("tokens"), arg.get("close_ids")) if isinstance(arg, dict) else (None, None)
        valid_close = isinstance(close, list | tuple) and bool(close) and all(isinstance(i, int) and i >= 0 for i in close)
        if not (isinstance(tokens, int) and tokens >= 0 and valid_close):
            raise ValueError(f"{THINKING_BUDGET_ARG} must be {{'tokens': int >= 0, 'close_ids': [the end token id, "
                             f"then the ids that follow it]}}, got {arg!r}")

    def is_argmax_invariant(self) -> bool:
        return False  # forcing a token changes the greedy choice too

    @staticmethod
    def _section(params: SamplingParams, _prompt: list[int] | None, output: list[int]) -> _Section | None:
        arg = (params.extra_args or {}).get(THINKING_BUDGET_ARG)
        if arg is None:
            return None
        section = _Section(tokens=arg["tokens"], close_ids=tuple(arg["close_ids"]), output=output)
        return None if section.ended() else section  # a request resumed after preemption may have closed it

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self._sections, batch_update, self._section)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        rows: list[int] = []
        forced: list[int] = []
        for index, section in list(self._sections.items()):
            token = section.next_forced()
            if section.closed:
                del self._sections[index]
            elif token is not None:
                rows.append(index)
                forced.append(token)
        if rows:
            row_index = torch.tensor(rows, device=logits.device)
            token_index = torch.tensor(forced, device=logits.device)
            logits[row_index] = float("-inf")
            logits[row_index, token_index] = 0.0
        return logits
