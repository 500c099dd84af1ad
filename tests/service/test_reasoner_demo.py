"""The README's reasoner demo: `thinktier up --policy policies/examples/reasoner.yaml` serves the project's own
reasoning model, which works a chained addition out in its thinking, reaches the right result and then answers it in
the prompt's language."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.live import thinktier_up
from thinktier.training.reasoner.tasks import ChainProblem

POLICY = Path(__file__).parents[2] / "policies" / "examples" / "reasoner.yaml"


@pytest.fixture
def up_reasoner() -> Iterator[str]:
    with thinktier_up("--policy", str(POLICY)) as (url, _):
        yield url


@pytest.mark.integration
def test_the_reasoner_thinks_first_then_answers_right_and_its_chat_tier_answers_without_thinking(up_reasoner: str) -> None:
    client = openai.OpenAI(base_url=f"{up_reasoner}/v1", api_key="unused")
    problem = ChainProblem(start=37, step=48, count=6, language="es", template=1)
    stream = client.chat.completions.create(
        model="thinktier", reasoning_effort="high", messages=[{"role": "user", "content": problem.prompt}],
        temperature=0.0, stream=True,
    )
    order: list[str] = []
    reasoning, content = "", ""
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        thought = (delta.model_extra or {}).get("reasoning") or ""
        if thought:
            order.append("reasoning")
            reasoning += thought
        if delta.content:
            order.append("content")
            content += delta.content
    assert order and order[0] == "reasoning", "the thinking comes first"
    assert "content" in order and "reasoning" not in order[order.index("content"):], "then only the answer"
    assert "; 0 to go." in reasoning, "the thinking works the chain to its last step"
    assert f"That makes {problem.answer}." in reasoning, "and reaches the right result"
    assert problem.is_correct(content), "then the right answer, boxed"
    assert content.strip().startswith("El número final es"), "in the prompt's language"
    chat = client.chat.completions.create(
        model="reasoner-chat", messages=[{"role": "user", "content": "Hola, ¿qué tal?"}], temperature=0.0,
    )
    message = chat.choices[0].message
    assert not (message.model_extra or {}).get("reasoning"), "thinking off: the chat tier's prompt closes the section"
    assert message.content in {"¡Hola! ¿En qué puedo ayudarte hoy?", "¡De nada! Que tengas un buen día."}, (
        "a reply the model was taught for Spanish small talk"
    )
    one_step = ChainProblem(start=47, step=38, count=1, language="fr")
    off = client.chat.completions.create(
        model="reasoner-chat", messages=[{"role": "user", "content": one_step.prompt}], temperature=0.0,
    )
    assert one_step.is_correct(off.choices[0].message.content), "without thinking a one-step problem is still right"
    assert off.choices[0].message.content.startswith("7+8=15, 4+3+1=8."), "from a line of working in the answer"
