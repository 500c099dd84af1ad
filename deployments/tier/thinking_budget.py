"""A vLLM logits processor that ends a request's thinking section at its budget, at O(1) cost per sequence and step.

vLLM's own `thinking_token_budget` (0.24) rescans a request's whole output for the end token on every step until the
section ends: Python work of O(output length) per sequence, between the forward pass and sampling. At 60 sequences
of ~1,500 thinking tokens that is several milliseconds a step (about 100 ns per token on this project's CPUs), which
is what held the served GPU engines at 100 % CPU with the GPU a third idle (loadtest/results/gpu-fullstack/). This
processor looks only at the tokens added since its last look.

A request opts in through `SamplingParams.extra_args[THINKING_BUDGET_ARG]` = {"tokens": N, "end_id": ID}
(`DecodeLimits.sampler_args` in deployments/tier/thinking.py): the
prompt has opened the section, and once N tokens are out without the end token, the next one is forced to be it.
Requests without the argument are left alone. Speculative decoding is not supported (tiers do not use it).
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
    end_id: int
    output: list[int]
    """vLLM's live output list of the request: it grows in place step by step."""
    seen: int = 0
    """Tokens of `output` already looked at for the end token."""

    def ended(self) -> bool:
        """Whether the end token is among the tokens added since the last look (which then moves on)."""
        output = self.output
        new = len(output)
        while new > self.seen and output[new - 1] == PLACEHOLDER:
            new -= 1
        closed = self.end_id in output[self.seen:new]
        self.seen = new
        return closed


class ThinkingBudgetProcessor(LogitsProcessor):
    """Forces the end token of the thinking section once a request has spent its budget (see the module docstring)."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        self._sections: dict[int, _Section] = {}

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        arg = (sampling_params.extra_args or {}).get(THINKING_BUDGET_ARG)
        if arg is None:
            return
        if not isinstance(arg, dict) or not all(isinstance(arg.get(k), int) and arg[k] >= 0 for k in ("tokens", "end_id")):
            raise ValueError(f"{THINKING_BUDGET_ARG} must be {{'tokens': int >= 0, 'end_id': int >= 0}}, got {arg!r}")

    def is_argmax_invariant(self) -> bool:
        return False  # forcing a token changes the greedy choice too

    @staticmethod
    def _section(params: SamplingParams, _prompt: list[int] | None, output: list[int]) -> _Section | None:
        arg = (params.extra_args or {}).get(THINKING_BUDGET_ARG)
        if arg is None:
            return None
        section = _Section(tokens=arg["tokens"], end_id=arg["end_id"], output=output)
        return None if section.ended() else section  # a request resumed after preemption may have closed it

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self._sections, batch_update, self._section)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        rows: list[int] = []
        end_ids: list[int] = []
        for index, section in list(self._sections.items()):
            if section.ended():
                del self._sections[index]
            elif section.seen >= section.tokens:
                rows.append(index)
                end_ids.append(section.end_id)
        if rows:
            row_index = torch.tensor(rows, device=logits.device)
            end_index = torch.tensor(end_ids, device=logits.device)
            logits[row_index] = float("-inf")
            logits[row_index, end_index] = 0.0
        return logits
