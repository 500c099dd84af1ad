"""OpenAI wire shapes: validated requests in, completion objects, SSE chunks and error bodies out."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from thinktier.deployments.tier.protocol import TierChunk
from thinktier.policies.schema import Effort

NO_THINKING_EFFORTS = ("none", "minimal")
"""reasoning_effort values that turn thinking off (OpenAI's names for a model's no-reasoning mode)."""

MAX_TOKENS = 2**31 - 1
"""Upper bound of every token count a client may send (vLLM's own bound); the policy clips far below it."""
MAX_STOPS = 4


def _encodable(text: str) -> str:
    """Text must be valid Unicode: JSON can carry a lone surrogate ("\\ud800") that no tokenizer can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text is not valid Unicode ({exc.reason} at character {exc.start})") from None
    return text


Text = Annotated[str, AfterValidator(_encodable)]
StopText = Annotated[str, Field(min_length=1), AfterValidator(_encodable)]


class OpenAIRequest(BaseModel):
    """Fields both routes share. Unknown OpenAI fields are accepted and ignored, as vLLM's server does."""

    model_config = ConfigDict(extra="ignore")

    model: Text = Field(min_length=1)
    stream: bool = False
    stream_options: dict[str, bool] | None = None
    max_tokens: int | None = Field(
        None, ge=1, le=MAX_TOKENS, description="Cap on answer (visible) tokens, clipped to the policy."
    )
    temperature: float = Field(0.7, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    n: int = Field(
        1, ge=1, le=1,
        description="One choice per request; for self-consistency (several samples voting on one answer) send `samples`.",
    )
    samples: int | None = Field(
        None, ge=1, le=16, description="thinktier: self-consistency samples that vote on the answer, clipped to the policy."
    )
    early_stop: bool = Field(
        True, description="thinktier: false lets every sample run to its end and the thinking to its budget."
    )
    early_stop_agree: int | None = Field(
        None, ge=2, le=16,
        description="thinktier: certainty exit ends the thinking only after this many agreeing probes (it can tighten "
        "the policy's count, never loosen it).",
    )
    seed: int | None = Field(None, ge=-(2**63), le=2**63 - 1, description="Sampling seed (vLLM's int64 range).")
    stop: StopText | list[StopText] | None = Field(None, description="Up to 4 non-empty stop strings.")
    reasoning_effort: Effort | Literal["none", "minimal"] | None = Field(
        None, description="low/medium/high pick the budget; none or minimal turn thinking off (the chat tier serves)."
    )
    thinking: bool | None = Field(None, description="thinktier: false turns thinking off, as reasoning_effort none does.")
    max_thinking_tokens: int | None = Field(
        None, ge=0, le=MAX_TOKENS, description="thinktier: cap on thinking tokens, clipped to the policy."
    )
    user: Text | None = None

    @field_validator("stop")
    @classmethod
    def _at_most_four_stops(cls, stop: str | list[str] | None) -> str | list[str] | None:
        if isinstance(stop, list) and len(stop) > MAX_STOPS:
            raise ValueError(f"at most {MAX_STOPS} stop strings, got {len(stop)}")
        return stop

    def prompt_text(self) -> str:
        """The text the difficulty classifier reads."""
        raise NotImplementedError

    @property
    def answer_cap(self) -> int | None:
        """The client's cap on answer tokens."""
        raise NotImplementedError

    @property
    def thinking_off(self) -> bool:
        """The caller asked for no thinking (agent frameworks mark their non-thinking steps this way)."""
        return self.thinking is False or self.reasoning_effort in NO_THINKING_EFFORTS

    @property
    def effort(self) -> Effort | None:
        """The effort level asked for, when it names one."""
        return None if self.reasoning_effort in NO_THINKING_EFFORTS else self.reasoning_effort  # type: ignore[return-value]

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))

    @property
    def stop_list(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class TextPart(BaseModel):
    type: Literal["text"]
    text: Text


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant"]
    content: Text | list[TextPart]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ChatCompletionRequest(OpenAIRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _has_a_prompt(self) -> ChatCompletionRequest:
        if not self.prompt_text().strip():
            raise ValueError("the prompt is empty: the last user message has no text")
        return self

    @property
    def answer_cap(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def prompt_text(self) -> str:
        """The last user message: what the difficulty classifier reads."""
        users = [m.text() for m in self.messages if m.role == "user"]
        return users[-1] if users else self.messages[-1].text()

    def message_dicts(self) -> tuple[dict[str, str], ...]:
        return tuple({"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in self.messages)


class CompletionRequest(OpenAIRequest):
    prompt: Text | list[Text]
    max_tokens: int | None = Field(16, ge=1, le=MAX_TOKENS)

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, prompt: str | list[str]) -> str | list[str]:
        if isinstance(prompt, list) and len(prompt) != 1:
            raise ValueError("exactly one prompt per request is supported; send a list of prompts as separate requests")
        if not (prompt if isinstance(prompt, str) else prompt[0]).strip():
            raise ValueError("the prompt is empty")
        return prompt

    @property
    def answer_cap(self) -> int | None:
        return self.max_tokens

    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


class APIError(Exception):
    """An error with its HTTP status and OpenAI error body."""

    def __init__(
        self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None,
        code: str | None = None, headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
        self.headers = headers or {}


RequestT = TypeVar("RequestT", bound=OpenAIRequest)


@dataclass(frozen=True)
class Unsupported:
    """An OpenAI field this service does not implement: what it asks for, and the values that ask for nothing."""

    asks_for: str
    harmless: tuple[Any, ...] = (None, False, [], {})


UNSUPPORTED_FIELDS: dict[str, Unsupported] = {
    "tools": Unsupported("tool calling"),
    "tool_choice": Unsupported("tool calling", (None, "none", "auto")),
    "functions": Unsupported("function calling"),
    "function_call": Unsupported("function calling", (None, "none", "auto")),
    "response_format": Unsupported("structured output (JSON mode, JSON schema)", (None, {"type": "text"})),
    "logprobs": Unsupported("log probabilities", (None, False)),
    "top_logprobs": Unsupported("log probabilities", (None, 0)),
    "logit_bias": Unsupported("logit bias"),
    "presence_penalty": Unsupported("sampling penalties", (None, 0)),
    "frequency_penalty": Unsupported("sampling penalties", (None, 0)),
    "best_of": Unsupported("best-of sampling (send `samples` for self-consistency)", (None, 1)),
    "echo": Unsupported("echoing the prompt", (None, False)),
    "suffix": Unsupported("suffixes", (None, "")),
}
"""OpenAI fields this service does not implement: refused when they ask for something (anything but the defaults
clients send), rather than dropped, so that no answer silently ignores what its client asked for."""


def unsupported_field(data: dict[str, Any]) -> str | None:
    """The first field of a request body that asks for something this service does not implement, or None."""
    for name, unsupported in UNSUPPORTED_FIELDS.items():
        value = data.get(name)
        if not any(value == ok and isinstance(value, bool) == isinstance(ok, bool) for ok in unsupported.harmless):
            return name
    return None


def parse_request(raw: bytes, model: type[RequestT]) -> RequestT:
    """Validate a request body; a precise 400 naming the field otherwise."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise APIError(400, f"request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:
        raise APIError(400, "request body nests JSON too deeply", code="invalid_json") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise APIError(400, f"request body has a value JSON cannot carry here: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise APIError(400, "request body must be a JSON object", code="invalid_json")
    if (name := unsupported_field(data)) is not None:
        raise APIError(400, f"`{name}` is not supported: thinktier does not implement {UNSUPPORTED_FIELDS[name].asks_for}; leave "
                       "the field out or send its default", param=name, code="unsupported_parameter")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = list(dict.fromkeys((_field_path(e["loc"]), e["msg"].removeprefix("Value error, ")) for e in exc.errors()))
        text = "; ".join(f"{path}: {message}" if path else message for path, message in problems)
        raise APIError(400, f"invalid request: {text}", param=problems[0][0] or None, code="invalid_value") from None


def _field_path(loc: tuple[int | str, ...]) -> str:
    """'messages.0.content' from pydantic's location, without the names it gives the branches of a union."""
    return ".".join(str(part) for part in loc if isinstance(part, int) or part.isidentifier())


def usage(chunk: TierChunk) -> dict[str, Any]:
    completion = chunk.reasoning_tokens + chunk.answer_tokens
    return {
        "prompt_tokens": chunk.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": chunk.prompt_tokens + completion,
        "completion_tokens_details": {"reasoning_tokens": chunk.reasoning_tokens},
    }


def economy_fields(chunk: TierChunk) -> dict[str, Any]:
    """thinktier's fields of a completion (or of a stream's last event): the samples' votes and the early stop."""
    economy = chunk.economy
    if economy is None:
        return {}
    fields: dict[str, Any] = {}
    if economy.votes is not None:
        fields["votes"] = economy.votes
    if economy.early_stop is not None:
        fields["early_stop"] = economy.early_stop
    return fields


def economy_headers(chunk: TierChunk) -> dict[str, str]:
    """The same as response headers (non-streamed responses: a stream's headers leave before the vote)."""
    economy = chunk.economy
    if economy is None:
        return {}
    headers: dict[str, str] = {}
    if economy.votes is not None:
        headers["votes"] = json.dumps(economy.votes)  # ASCII-escaped: any answer fits a header
        headers["samples-aborted"] = str(economy.samples_aborted)
    if economy.early_stop is not None:
        headers["early-stop"] = economy.early_stop
    return headers


def chat_completion(request_id: str, model: str, whole: TierChunk) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": whole.content}
    if whole.reasoning or whole.reasoning_tokens:
        message["reasoning"] = message["reasoning_content"] = whole.reasoning
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": whole.finish_reason, "logprobs": None}],
        "usage": usage(whole),
    } | economy_fields(whole)


def _text_choice(chunk: TierChunk, with_reasoning: bool) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "text": chunk.content, "finish_reason": chunk.finish_reason, "logprobs": None}
    if with_reasoning:
        choice["reasoning"] = choice["reasoning_content"] = chunk.reasoning
    return choice


def text_completion(request_id: str, model: str, whole: TierChunk) -> dict[str, Any]:
    choice = _text_choice(whole, bool(whole.reasoning or whole.reasoning_tokens))
    return {
        "id": request_id,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(whole),
    } | economy_fields(whole)


SSE_DONE = "data: [DONE]\n\n"
SSE_KEEP_ALIVE = ": keep-alive\n\n"
"""An SSE comment, which clients skip: what a stream sends for a chunk with nothing in it (a vote whose streamed
sample has ended while the others still think), so that no proxy or client takes the stream for dead."""


def sse_error(message: str, request_id: str, code: str = "stream_failed") -> str:
    """An error event for a stream that already sent its 200: the OpenAI error body as one more event."""
    body = {"error": {"message": message, "type": "server_error", "param": None, "code": code}, "id": request_id}
    return f"data: {json.dumps(body)}\n\n"


@dataclass(frozen=True)
class SSEFramer:
    """One streamed completion as Server-Sent Events in OpenAI's chunk shapes. A (coalesced) TierChunk becomes
    one event, whatever number of tokens it carries; the usage event follows the last when the client asked."""

    chat: bool
    request_id: str
    model: str
    include_usage: bool
    created: int = field(default_factory=lambda: int(time.time()))

    def _event(self, choices: list[dict[str, Any]], usage_of: TierChunk | None = None,
               extra: dict[str, Any] | None = None) -> str:
        body: dict[str, Any] = {
            "id": self.request_id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        } | (extra or {})
        if usage_of is not None:
            body["usage"] = usage(usage_of)
        return f"data: {json.dumps(body)}\n\n"

    def start(self) -> str:
        """What opens the stream: the assistant role (chat only)."""
        if not self.chat:
            return ""
        return self._event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None, "logprobs": None}])

    def events(self, chunk: TierChunk) -> str:
        """The events of one chunk: its text (if any, or its end), then usage after the last one; a keep-alive comment
        for a chunk with neither."""
        if not (chunk.reasoning or chunk.content or chunk.finish_reason):
            return SSE_KEEP_ALIVE
        out = ""
        if self.chat:
            delta: dict[str, Any] = {}
            if chunk.reasoning:
                delta["reasoning"] = delta["reasoning_content"] = chunk.reasoning
            if chunk.content:
                delta["content"] = chunk.content
            if delta or chunk.finish_reason:
                choice = {"index": 0, "delta": delta, "finish_reason": chunk.finish_reason, "logprobs": None}
                out = self._event([choice], extra=economy_fields(chunk))
        else:
            out = self._event([_text_choice(chunk, bool(chunk.reasoning))], extra=economy_fields(chunk))
        if chunk.finish_reason is not None and self.include_usage:
            out += self._event([], usage_of=chunk)
        return out
