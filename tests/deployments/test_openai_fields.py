"""OpenAI fields the service does not implement are refused with a 400 that names them, not silently dropped; the
defaults clients send for them pass."""

from __future__ import annotations

import json
from typing import Any

import pytest

from thinktier.deployments.request import openai_api as oa

CHAT: dict[str, Any] = {"model": "thinktier", "messages": [{"role": "user", "content": "What is 2 + 2?"}]}


def _parse(**fields: Any) -> oa.ChatCompletionRequest:
    return oa.parse_request(json.dumps(CHAT | fields).encode(), oa.ChatCompletionRequest)


@pytest.mark.parametrize(("name", "value", "asks_for"), [
    ("tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}], "tool calling"),
    ("tool_choice", "required", "tool calling"),
    ("response_format", {"type": "json_object"}, "structured output"),
    ("logprobs", True, "log probabilities"),
    ("top_logprobs", 5, "log probabilities"),
    ("logit_bias", {"50256": -100}, "logit bias"),
    ("presence_penalty", 0.5, "sampling penalties"),
    ("frequency_penalty", -1, "sampling penalties"),
    ("best_of", 3, "best-of sampling"),
])
def test_a_field_asking_for_what_is_not_implemented_is_refused_by_name(name: str, value: Any, asks_for: str) -> None:
    with pytest.raises(oa.APIError) as refused:
        _parse(**{name: value})
    error = refused.value
    assert error.status == 400 and error.body["error"]["param"] == name
    assert error.body["error"]["code"] == "unsupported_parameter"
    assert f"`{name}` is not supported" in error.body["error"]["message"] and asks_for in error.body["error"]["message"]


def test_the_defaults_clients_send_for_those_fields_pass() -> None:
    parsed = _parse(tools=[], tool_choice="none", response_format={"type": "text"}, logprobs=False, top_logprobs=0,
                    logit_bias={}, presence_penalty=0, frequency_penalty=0.0, best_of=1, echo=False, suffix=None)
    assert parsed.prompt_text() == "What is 2 + 2?"
    with pytest.raises(oa.APIError, match="`logprobs` is not supported"):
        _parse(logprobs=1)  # the completions API's count of log probabilities: it asks for some
