"""The reasoner's task family: chained additions whose number of steps is the difficulty, and chat turns.

A problem starts at a two-digit number and adds the same number again and again, keeping the last two digits
(arithmetic modulo 100, as a counter with two digits shows it). Each addition is one step of thinking, so the
thinking a problem needs grows with its step count, and every answer is checked exactly. There is a closed form
(start + step x count mod 100); the model is never shown it, so it has to work step by step, as a reasoning model
works through a long derivation.

Prompts are written as a person would ask, from several templates in each of three languages. Chat turns
(greetings, thanks, asking to repeat a word) need no thinking: the classifier, the chat tier and routing see them too.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from thinktier.deployments.tier.answers import extract_answer
from thinktier.policies.schema import DifficultyClass

Language = Literal["en", "es", "fr"]
LANGUAGES: tuple[Language, ...] = ("en", "es", "fr")
MODULUS = 100

PROBLEM_TEMPLATES: dict[Language, tuple[str, ...]] = {
    "en": (
        "Start with {start}. Add {step} to it {count} times, keeping only the last two digits after each addition. "
        "What number do you end with?",
        "A counter shows {start}. Every press of the button adds {step}, but the counter only has two digits, so it "
        "keeps the last two. What does it show after {count} presses?",
        "I begin at {start} and add {step}, {count} times in a row, working modulo 100. Where do I end up?",
        "Compute ({start} + {count} additions of {step}) mod 100, adding one step at a time.",
    ),
    "es": (
        "Empieza con {start}. Súmale {step} {count} veces y quédate solo con las dos últimas cifras después de cada "
        "suma. ¿Con qué número terminas?",
        "Un contador marca {start}. Cada pulsación suma {step}, pero el contador solo tiene dos cifras y guarda las "
        "dos últimas. ¿Qué marca después de {count} pulsaciones?",
        "Parto de {start} y sumo {step}, {count} veces seguidas, módulo 100. ¿Dónde termino?",
    ),
    "fr": (
        "Commence par {start}. Ajoute {step} {count} fois, en ne gardant que les deux derniers chiffres après chaque "
        "addition. Quel nombre obtiens-tu ?",
        "Un compteur affiche {start}. Chaque appui ajoute {step}, mais le compteur n'a que deux chiffres et garde les "
        "deux derniers. Qu'affiche-t-il après {count} appuis ?",
        "Je pars de {start} et j'ajoute {step}, {count} fois de suite, modulo 100. Où est-ce que j'arrive ?",
    ),
}

ANSWER_TEMPLATES: dict[Language, str] = {
    "en": "The number you end with is $\\boxed{{{answer}}}$.",
    "es": "El número final es $\\boxed{{{answer}}}$.",
    "fr": "Le nombre final est $\\boxed{{{answer}}}$.",
}


@dataclass(frozen=True)
class ChainProblem:
    """Add `step` to `start` `count` times, modulo 100."""

    start: int
    step: int
    count: int
    language: Language = "en"
    template: int = 0

    def value_after(self, steps: int) -> int:
        return (self.start + self.step * steps) % MODULUS

    @property
    def answer(self) -> int:
        return self.value_after(self.count)

    @property
    def prompt(self) -> str:
        templates = PROBLEM_TEMPLATES[self.language]
        return templates[self.template % len(templates)].format(start=self.start, step=self.step, count=self.count)

    def answer_text(self, answer: int) -> str:
        return ANSWER_TEMPLATES[self.language].format(answer=answer)

    def is_correct(self, text: str | None) -> bool:
        """Whether a visible answer (or any text ending in one) gives this problem's answer."""
        found = extract_answer(text or "")
        return found is not None and found.strip().lstrip("0") == str(self.answer).lstrip("0")


@dataclass(frozen=True)
class Difficulty:
    """The step counts of each class for one model size: what the classifier and the budgets see as difficulty."""

    easy: tuple[int, int]
    medium: tuple[int, int]
    hard: tuple[int, int]

    def counts(self, difficulty: DifficultyClass) -> tuple[int, int]:
        lo_hi: tuple[int, int] = getattr(self, difficulty)
        return lo_hi

    def of(self, count: int) -> DifficultyClass:
        """The class of a step count (counts between two classes go to the nearer one above)."""
        if count <= self.easy[1]:
            return "easy"
        return "medium" if count <= self.medium[1] else "hard"


def sample_problem(rng: random.Random, count: int, language: Language | None = None) -> ChainProblem:
    chosen = rng.choice(LANGUAGES) if language is None else language
    return ChainProblem(
        start=rng.randrange(MODULUS),
        step=rng.randrange(11, MODULUS),
        count=count,
        language=chosen,
        template=rng.randrange(len(PROBLEM_TEMPLATES[chosen])),
    )


def problems(difficulty: Difficulty, per_class: int, seed: int, language: Language | None = None
             ) -> list[tuple[DifficultyClass, ChainProblem]]:
    """`per_class` problems of each class, step counts uniform in the class's range: a seeded evaluation set."""
    rng = random.Random(seed)
    out: list[tuple[DifficultyClass, ChainProblem]] = []
    names: tuple[DifficultyClass, ...] = ("easy", "medium", "hard")
    for name in names:
        lo, hi = difficulty.counts(name)
        out += [(name, sample_problem(rng, rng.randint(lo, hi), language)) for _ in range(per_class)]
    return out


@dataclass(frozen=True)
class ChatTurn:
    """A turn that needs no thinking, with the reply the model is taught."""

    prompt: str
    reply: str
    language: Language


_GREETINGS: dict[Language, tuple[tuple[str, ...], str]] = {
    "en": (("Hi!", "Hello there.", "Good morning!", "Hey, how are you?", "Hello, nice to meet you."),
           "Hello! How can I help you today?"),
    "es": (("¡Hola!", "Buenos días.", "Hola, ¿qué tal?", "¡Buenas tardes!", "Hola, encantado de conocerte."),
           "¡Hola! ¿En qué puedo ayudarte hoy?"),
    "fr": (("Salut !", "Bonjour.", "Bonjour, comment ça va ?", "Bonsoir !", "Bonjour, ravi de te rencontrer."),
           "Bonjour ! Comment puis-je t'aider aujourd'hui ?"),
}
_THANKS: dict[Language, tuple[tuple[str, ...], str]] = {
    "en": (("Thanks!", "Thank you so much.", "Great, thanks for the help.", "Bye for now."),
           "You're welcome! Have a nice day."),
    "es": (("¡Gracias!", "Muchas gracias.", "Genial, gracias por la ayuda.", "Hasta luego."),
           "¡De nada! Que tengas un buen día."),
    "fr": (("Merci !", "Merci beaucoup.", "Super, merci pour l'aide.", "À bientôt."),
           "De rien ! Bonne journée."),
}
_REPEAT: dict[Language, tuple[str, str]] = {
    "en": ("Please repeat this word: {word}", "{word}"),
    "es": ("Repite esta palabra, por favor: {word}", "{word}"),
    "fr": ("Répète ce mot, s'il te plaît : {word}", "{word}"),
}
_WORDS = ("apple", "river", "garden", "window", "yellow", "music", "planet", "coffee", "mountain", "pencil",
          "silver", "orange", "bridge", "cloud", "forest", "candle", "rocket", "tiger", "harbor", "lemon")


def sample_chat(rng: random.Random, language: Language | None = None) -> ChatTurn:
    chosen = rng.choice(LANGUAGES) if language is None else language
    kind = rng.randrange(3)
    if kind == 2:
        ask, reply = _REPEAT[chosen]
        word = rng.choice(_WORDS)
        return ChatTurn(ask.format(word=word), reply.format(word=word), chosen)
    prompts, reply = (_GREETINGS if kind == 0 else _THANKS)[chosen]
    return ChatTurn(rng.choice(prompts), reply, chosen)
