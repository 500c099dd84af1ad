"""One streaming chat completion through the OpenAI protocol, timed the way a user feels it.

TTFT is the first generated text of any kind (thinking included); TTFVT, the first *visible* token, is
the first non-empty `content` delta: the thinking a reasoning model streams first (`reasoning`, or its
deprecated name `reasoning_content`) is not something the user reads as an answer. The visible answer (the
`content` deltas together) is checked against the prompt's answer when it has one.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from thinktier.loadtest.workload import AnswerCheck, WorkItem
from thinktier.policies.schema import Effort

DECISION_HEADERS = {
    "tier": "x-thinktier-tier",
    "effort": "x-thinktier-effort",
    "difficulty": "x-thinktier-difficulty",
    "thinking_budget": "x-thinktier-thinking-budget",
    "degraded": "x-thinktier-degraded",
    "borrowed": "x-thinktier-borrowed",
}
REASONING_FIELDS = ("reasoning", "reasoning_content")


@dataclass(frozen=True)
class RequestOptions:
    """What every request of a run carries besides its prompt."""

    model: str | None = None
    """Sent as `model`; None leaves it out (thinktier then routes by difficulty)."""
    max_tokens: int | None = None
    reasoning_effort: Effort | None = None
    max_thinking_tokens: int | None = None
    thinking_token_budget: int | None = None
    """vLLM's own per-request thinking cap (a top-level field of its OpenAI server), for vLLM-based peers."""
    temperature: float | None = None
    api_key: str | None = None

    def body(self, prompt: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": prompt}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        extras = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "reasoning_effort": self.reasoning_effort,
            "max_thinking_tokens": self.max_thinking_tokens,
            "thinking_token_budget": self.thinking_token_budget,
            "temperature": self.temperature,
        }
        body.update({k: v for k, v in extras.items() if v is not None})
        return body

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass
class RequestResult:
    """Everything measured about one request. Times are seconds; `start_s` is the offset from the run's start."""

    index: int
    request_class: str
    prompt_id: str
    start_s: float
    batch: int | None = None
    status: int | None = None
    error: str | None = None
    ttft_s: float | None = None
    ttfvt_s: float | None = None
    e2e_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    """From the server's usage; when it reports none (vLLM 0.24's OpenAI server), the streamed thinking deltas counted,
    which is the token count for servers that stream a token per delta, as vLLM does."""
    retry_after_s: float | None = None
    decision: dict[str, str] = field(default_factory=dict)
    correct: bool | None = None
    """Whether the visible answer was right: None when the prompt has no checkable answer, False when no complete
    answer came back."""

    @classmethod
    def of(cls, item: WorkItem, start_s: float) -> RequestResult:
        """The result of `item` before it is sent: not yet right when its answer is checkable."""
        correct = None if item.prompt.answer is None else False
        return cls(item.index, item.prompt.request_class, item.prompt.id, start_s, batch=item.batch, correct=correct)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> RequestResult:
        """A result read back from a requests.jsonl row (which also names its run)."""
        return cls(**{k: v for k, v in row.items() if k in cls.__dataclass_fields__})

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None

    @property
    def shed(self) -> bool:
        return self.status == 429

    @property
    def degraded(self) -> bool:
        return bool(self.decision.get("degraded"))

    @property
    def borrowed(self) -> bool:
        """Served on capacity another tier lent (x-thinktier-borrowed)."""
        return bool(self.decision.get("borrowed"))

    @property
    def thought(self) -> bool:
        """Whether the stream began with thinking."""
        return self.ttft_s is not None and (self.ttfvt_s is None or self.ttft_s < self.ttfvt_s)

    @property
    def answer_tokens(self) -> int | None:
        """Completion tokens that were answer; None when the request thought but the split is unknown."""
        if self.completion_tokens is None or (self.reasoning_tokens is None and self.thought):
            return None
        return self.completion_tokens - (self.reasoning_tokens or 0)


def _has_text(delta: dict[str, Any], *names: str) -> bool:
    return any(isinstance(delta.get(n), str) and delta[n] for n in names)


class _StreamTimer:
    """Reads SSE chunks, stamps the first thinking and first answer delta, and keeps the answer's text."""

    def __init__(self, result: RequestResult, t0: float) -> None:
        self.result = result
        self.t0 = t0
        self.thinking_deltas = 0
        self.answer_parts: list[str] = []

    def chunk(self, data: dict[str, Any], now: float) -> None:
        result = self.result
        if "error" in data:
            error = data["error"]
            result.error = error.get("message", str(error)) if isinstance(error, dict) else str(error)
            return
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or {}
            thinking = _has_text(delta, *REASONING_FIELDS)
            answer = _has_text(delta, "content")
            self.thinking_deltas += thinking
            if answer:
                self.answer_parts.append(delta["content"])
            if (thinking or answer) and result.ttft_s is None:
                result.ttft_s = now - self.t0
            if answer and result.ttfvt_s is None:
                result.ttfvt_s = now - self.t0
        usage = data.get("usage")
        if usage:
            result.prompt_tokens = usage.get("prompt_tokens")
            result.completion_tokens = usage.get("completion_tokens")
            details = usage.get("completion_tokens_details") or {}
            result.reasoning_tokens = details.get("reasoning_tokens")

    def finish(self, answer: AnswerCheck | None) -> None:
        """At the end of the stream: the thinking deltas stand in for a reasoning count the server did not report, and
        a complete answer is checked by `answer`."""
        result = self.result
        if result.reasoning_tokens is None and self.thinking_deltas:
            result.reasoning_tokens = min(self.thinking_deltas, result.completion_tokens or self.thinking_deltas)
        if answer is not None and result.ok:
            result.correct = answer.is_correct("".join(self.answer_parts))


async def send(client: httpx.AsyncClient, url: str, item: WorkItem, options: RequestOptions, run_t0: float) -> RequestResult:
    """Send one streaming chat completion to `url` (the /v1/chat/completions endpoint) and time it.
    Never raises for server or network trouble: that is recorded in the result."""
    t0 = time.perf_counter()
    result = RequestResult.of(item, t0 - run_t0)
    try:
        async with client.stream("POST", url, json=options.body(item.prompt.text), headers=options.headers()) as response:
            result.status = response.status_code
            result.decision = {k: response.headers[h] for k, h in DECISION_HEADERS.items() if h in response.headers}
            if response.status_code != 200:
                await _record_refusal(response, result)
                return result
            timer = _StreamTimer(result, t0)
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                timer.chunk(json.loads(payload), time.perf_counter())
            timer.finish(item.prompt.answer)
        result.e2e_s = time.perf_counter() - t0
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


async def _record_refusal(response: httpx.Response, result: RequestResult) -> None:
    body = (await response.aread()).decode(errors="replace")
    try:
        error = json.loads(body).get("error", body)
        message = error.get("message", str(error)) if isinstance(error, dict) else str(error)
    except (json.JSONDecodeError, AttributeError):
        message = body
    result.error = f"HTTP {response.status_code}: {message[:300]}"
    retry_after = response.headers.get("retry-after")
    if retry_after:
        try:
            result.retry_after_s = float(retry_after)
        except ValueError:
            result.error += f" (unparseable Retry-After {retry_after!r})"
