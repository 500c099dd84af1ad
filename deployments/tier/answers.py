"""Final answers of reasoning samples: extraction, equivalence and the vote count of self-consistency.

Self-consistency decodes N samples of one prompt and returns the answer most of them reach. A vote only means
something when the same answer counts as the same however a sample wrote it: `\\boxed{\\frac{1}{2}}`, `$0.5$`
and "The answer is 1/2." are one vote for one half, "1,000 dollars" and "1000" one vote for a thousand. So
every answer gets a canonical key, and votes are counted per key:

- numbers (integers, decimals, fractions in LaTeX or with a slash, thousands separators, signs, percent and
  degree signs, a short list of units) become exact fractions, so equal values get equal keys and different
  values never do (no floating point, no tolerance);
- other LaTeX (roots, intervals, tuples, expressions) is compared after its written-form noise is removed
  (delimiters, spacing commands, `\\left`/`\\right`, `\\dfrac`, unbraced arguments);
- free text is compared casefolded with its whitespace collapsed; for paraphrases the caller may supply a
  similarity test (embeddings), which the Ballot uses only when neither answer is a number: numbers never
  join by similarity, as 12 and 13 read alike.

The tier engine imports this module, so it is pure standard library: regular expressions and `fractions`, no
computer algebra (x+1 and 1+x stay different keys; sampling rarely writes one answer both ways).

Forms left as written, so they only meet the same form: mixed numbers (`1\\frac{1}{2}`: one and a half, or 1
times a half), scientific notation, a decimal comma or a space between thousands (`3,5` may be a pair or 3.5,
`1 000` a list), numbers inside LaTeX expressions (`(0.5, 1)` is not `(\\frac12, 1)`), units outside the short
list ("18 eggs" is free text unless it is the sentence after an answer marker), and answer markers in other
languages (a number after them is still found as the last number).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache

# ---------------------------------------------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------------------------------------------

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_MARKER = re.compile(r"####|\bfinal\s+answer\b(?:\s*(?:is\b|:))?|\banswer\s*(?:is\b|:)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?。](?:\s|$)")
_DIGITS = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+"
_NUMBER_IN_TEXT = re.compile(
    rf"(?<![\w.)\]}}])-?(?:\\[dt]?frac\{{\d+\}}\{{\d+\}}|\\[dt]?frac\d\d|(?<![\w.])(?:{_DIGITS})(?:/\d+)?)"
)
_PROSE_WORD = re.compile(r"[^\W\d_]{3,}")


def extract_answer(text: str) -> str | None:
    """The final answer in a model's visible answer text, or in a short probe continuation of it.

    In this order, the first that gives a non-empty answer:
    1. the content of the last `\\boxed{...}` or `\\fbox{...}` (balanced braces); an unclosed one, as in a probe
       continuation cut at "...\\boxed{42", gives what follows it up to the end of that line;
    2. the text after the last answer marker ("####" as in GSM8K, "final answer", "answer is", "Answer:") up to
       the end of its sentence or line (the next line when the marker ends its line); a sentence of prose
       around a number there ("18 eggs", "approximately 3.5") gives the number;
    3. the last number in the text (integer, decimal, negative, fraction as a/b or \\frac, thousands separators);
    4. the whole stripped text (a free-text answer, compared by the caller's similarity).
    None for empty or blank text.
    """
    stripped = text.strip()
    if not stripped:
        return None
    for found in (_boxed(stripped), _after_marker(stripped), _last_number(stripped)):
        if found:
            return found
    return stripped


def _boxed(text: str) -> str | None:
    """The content of the last non-empty box; an unclosed box runs to the end of its line, inner braces closed."""
    boxes = list(_BOX.finditer(text))
    partners = _brace_partners(text) if boxes else {}
    for match in reversed(boxes):
        open_at = match.end() - 1
        close_at = partners.get(open_at)
        if close_at is not None:
            content = text[open_at + 1 : close_at]
        else:
            content = text[open_at + 1 :].split("\n", 1)[0]
            content += "}" * max(0, content.count("{") - content.count("}"))
        if content.strip():
            return content.strip()
    return None


def _brace_partners(text: str) -> dict[int, int]:
    """The index of each opening brace's closing brace (escaped braces are not grouping)."""
    partners: dict[int, int] = {}
    opened: list[int] = []
    for i, char in enumerate(text):
        if text[i - 1 : i] == "\\":
            continue
        if char == "{":
            opened.append(i)
        elif char == "}" and opened:
            partners[opened.pop()] = i
    return partners


def _after_marker(text: str) -> str | None:
    """The answer after the last marker that is followed by one (see extract_answer, step 2)."""
    for match in reversed(list(_MARKER.finditer(text))):
        rest = text[match.end() :]
        line, _, following = rest.partition("\n")
        if not _clean_marked(line):
            line = next((candidate for candidate in following.split("\n") if candidate.strip()), "")
        end = _SENTENCE_END.search(line)
        answer = _clean_marked(line[: end.start()] if end else line)
        if answer:
            return _number_from_prose(answer)
    return None


def _clean_marked(text: str) -> str:
    """Marker leftovers removed: markdown emphasis, a colon, surrounding blanks and a final period."""
    return text.replace("**", "").strip().lstrip(":*_ ").strip().rstrip(".。").strip()


def _number_from_prose(answer: str) -> str:
    """The last number of a sentence of prose ("18 eggs" -> "18"); LaTeX and bare expressions stay as written."""
    if "\\" in answer or not _PROSE_WORD.search(answer):
        return answer
    return _last_number(answer) or answer


def _last_number(text: str) -> str | None:
    numbers = _NUMBER_IN_TEXT.findall(text)
    return numbers[-1] if numbers else None


# ---------------------------------------------------------------------------------------------------------------
# Canonical keys
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Key:
    text: str
    numeric: bool


_NOISE: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"[\u2212\u2013]", "-"),  # Unicode minus and en dash
        (r"∞", r"\\infty"),
        (r"\\\$|\$|€|£|¥", ""),  # math delimiters and currency signs
        (r"\*\*", ""),  # markdown bold
        (r"\\[()\[\]]", ""),  # \( \) \[ \]
        (r"\\(?:left|right|displaystyle)(?![A-Za-z])", ""),
        (r"\\[!,;:]", ""),  # thin spaces: 1\,000 is 1000
        (r"\\(?:q?quad)(?![A-Za-z])|\\ |~", " "),
        (r"\{,\}", ","),  # 1{,}000
        (r"\\[dt]frac(?![A-Za-z])", r"\\frac"),
        (r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree(?![A-Za-z])", ""),
        (r"\\%|%", ""),  # "10%" is 10: GSM8K percentages are answered as the number of percent
        (r"\\geq?(?![A-Za-z])", r"\\geq"),
        (r"\\leq?(?![A-Za-z])", r"\\leq"),
        (r"\\neq?(?![A-Za-z])", r"\\neq"),
    )
)
_WRAPPER = r"\\(?:text|textrm|textbf|textit|mathrm|mathbf|mathit|mbox)\s*\{([^{}]*)\}"
_TRAILING_TEXT = re.compile(rf"\s*{_WRAPPER}$")
_ASSIGNMENT = re.compile(r"(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?[A-Za-z0-9]+\}?)?\s*=\s*(?P<rhs>[^=]+)")
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_UNIT_WORDS = (
    "mm", "cm", "km", "kg", "mg", "ml", "sec", "secs", "second", "seconds", "min", "mins", "minute", "minutes", "hr",
    "hrs", "hour", "hours", "day", "days", "week", "weeks", "month", "months", "year", "years", "dollar", "dollars",
    "usd", "euro", "euros", "unit", "units", "inch", "inches", "ft", "foot", "feet", "yd", "yard", "yards", "mile",
    "miles", "meter", "meters", "metre", "metres", "degree", "degrees", "percent", "mph", "kph", "km/h", "m/s",
)
_UNIT_LETTERS = ("m", "g", "s", "h", "l")  # one-letter units only after a space: 2m may be 2 times m
_UNIT = re.compile(
    r"(?<=[\d}})])(?:\s*(?:(?:square|sq\.?|cubic)\s+)?(?:{words})|\s+(?:{letters}))(?:\^\{{?[23]\}}?|²|³)?$".format(
        words="|".join(re.escape(w) for w in sorted(_UNIT_WORDS, key=len, reverse=True)),
        letters="|".join(_UNIT_LETTERS),
    ),
    re.IGNORECASE,
)
_SIGNED = rf"[-+]?(?:{_DIGITS})"
_NUMBER = re.compile(
    rf"(?P<sign>[-+]?)(?:\\frac\{{(?P<num>{_SIGNED})\}}\{{(?P<den>{_SIGNED})\}}"
    rf"|(?P<over>{_SIGNED})/(?P<under>{_SIGNED})|(?P<value>{_DIGITS}))"
)
_GROUP = r"\{(?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*\}"  # a braced argument, up to three levels deep
_TOKEN = r"(?:\\[A-Za-z]+|[A-Za-z0-9])"  # an unbraced argument: one letter, digit or command
_UNBRACED: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (rf"\\sqrt\s*(\[[^\]]*\])?\s*({_TOKEN})", r"\\sqrt\1{\2}"),
        (rf"\\frac(?![A-Za-z])\s*({_TOKEN})\s*({_TOKEN})", r"\\frac{\1}{\2}"),
        (rf"\\frac(?![A-Za-z])\s*({_TOKEN})\s*(?=\{{)", r"\\frac{\1}"),
        (rf"\\frac(?![A-Za-z])\s*({_GROUP})\s*({_TOKEN})", r"\\frac\1{\2}"),
    )
)
_MATH_SIGNS = set("\\^_={}+*<>|")


def canonical(answer: str) -> str:
    """A key under which equal answers in different written forms meet (the module docstring lists the forms).

    A number's key is its reduced fraction, "p/q", or "p" for an integer. Boxes and answer markers are unwrapped
    first, so "The answer is 42." and "\\boxed{42}" have the key of "42".
    """
    return _key(answer).text


def same_answer(a: str, b: str) -> bool:
    """Whether two answers are the same answer in (maybe) different written forms."""
    return canonical(a) == canonical(b)


def is_numeric(answer: str) -> bool:
    """Whether the answer is a number (a math answer compared by value; other answers are LaTeX or free text)."""
    return _key(answer).numeric


@lru_cache(maxsize=4096)
def _key(answer: str) -> _Key:
    text = _unwrapped(answer.strip())
    for pattern, replacement in _NOISE:
        text = pattern.sub(replacement, text)
    text = _without_trailing_period(" ".join(text.split()))
    text = _assigned_value(text)
    text = _without_unit(text)
    text = _brace_arguments(text)
    text = _without_outer_braces(text)
    number = _parse_number(text)
    if number is not None:
        return _Key(str(number), numeric=True)
    if _is_free_text(text):
        return _Key(_strip_punctuation(text.casefold()), numeric=False)
    return _Key(_math_key(text), numeric=False)


def _unwrapped(text: str) -> str:
    """The box's content, else the marked answer, else the text itself."""
    return _boxed(text) or _after_marker(text) or text


def _without_trailing_period(text: str) -> str:
    return text.rstrip(".。 ")


def _assigned_value(text: str) -> str:
    """"x = 5" -> "5": the right side of a single variable's assignment (not of "x = 1, y = 2" or "x = 1, 2")."""
    match = _ASSIGNMENT.fullmatch(text)
    if not match:
        return text
    rhs = match["rhs"].strip()
    return rhs if "," not in rhs or _THOUSANDS.fullmatch(rhs) else text


def _without_unit(text: str) -> str:
    """A number's unit dropped: any trailing \\text{...} after a number, or a word of the short unit list."""
    for pattern in (_TRAILING_TEXT, _UNIT):
        match = pattern.search(text)
        if match and re.search(r"\d", text[: match.start()]):
            text = text[: match.start()].strip()
    return re.sub(_WRAPPER, r"\1", text).strip()


def _brace_arguments(text: str) -> str:
    """\\frac12 -> \\frac{1}{2}, \\sqrt6 -> \\sqrt{6}, \\sqrt[3]x -> \\sqrt[3]{x}: one-token arguments braced."""
    for pattern, replacement in _UNBRACED:
        text = pattern.sub(replacement, text)
    return text


def _without_outer_braces(text: str) -> str:
    """{5} -> 5: braces around the whole answer (LaTeX grouping) removed, however deep."""
    partners = _brace_partners(text)
    start, end = 0, len(text) - 1
    while start < end and text[start] == "{" and partners.get(start) == end:
        start, end = start + 1, end - 1
        while start <= end and text[start].isspace():
            start += 1
        while end >= start and text[end].isspace():
            end -= 1
    return text[start : end + 1]


def _parse_number(text: str) -> Fraction | None:
    """The exact value of a written number, or None when the text is not one."""
    compact = re.sub(r"\s*([{}/])\s*", r"\1", re.sub(r"^([-+])\s+", r"\1", text))  # "- 3", "1 / 2"; "1 2" stays
    match = _NUMBER.fullmatch(compact)
    if not match:
        return None
    if match["value"]:
        value = Fraction(match["value"].replace(",", ""))
    else:
        top, bottom = (match["num"], match["den"]) if match["num"] else (match["over"], match["under"])
        if Fraction(bottom.replace(",", "")) == 0:
            return None
        value = Fraction(top.replace(",", "")) / Fraction(bottom.replace(",", ""))
    return -value if match["sign"] == "-" else value


def _is_free_text(text: str) -> bool:
    """Words, not mathematics: a run of two letters or more and none of LaTeX's or algebra's signs."""
    return not _MATH_SIGNS & set(text) and re.search(r"[^\W\d_]{2,}", text) is not None


def _strip_punctuation(text: str) -> str:
    """Surrounding punctuation (any script's) and blanks removed."""
    start, end = 0, len(text)
    while start < end and _is_punctuation_or_space(text[start]):
        start += 1
    while end > start and _is_punctuation_or_space(text[end - 1]):
        end -= 1
    return text[start:end]


def _is_punctuation_or_space(char: str) -> bool:
    return char.isspace() or unicodedata.category(char).startswith("P")


def _math_key(text: str) -> str:
    """LaTeX and expressions without blanks, with +\\infty written as \\infty."""
    return "".join(text.split()).replace("+\\infty", "\\infty")


# ---------------------------------------------------------------------------------------------------------------
# Votes
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class _Group:
    representative: str
    key: _Key
    samples: list[int]


@dataclass
class Ballot:
    """Incremental vote count over the samples' answers, in the order they finish.

    An answer joins the first group whose representative has the same canonical key; failing that, when neither
    it nor the representative is a number and `similar` is given, the first group for which
    `similar(representative, answer)` holds; else it forms a group of its own. Keys are tried on every group
    before `similar` is asked about any, so an exact match wins over an earlier near one and the (costly)
    similarity runs only for answers no key matches.
    """

    similar: Callable[[str, str], bool] | None = None
    """Free-text equivalence (embedding similarity, supplied by the caller)."""
    _groups: list[_Group] = field(default_factory=list, init=False, repr=False)
    _voted: set[int] = field(default_factory=set, init=False, repr=False)

    def add(self, sample: int, answer: str | None) -> int:
        """Count `sample`'s answer; the size of the group it joined (0 for None or a blank answer, which votes for
        nothing). A sample votes once."""
        if sample in self._voted:
            raise ValueError(f"sample {sample} has already voted")
        self._voted.add(sample)
        if answer is None or not answer.strip():
            return 0
        group = self._group_of(answer)
        if group is None:
            group = _Group(answer, _key(answer), [])
            self._groups.append(group)
        group.samples.append(sample)
        return len(group.samples)

    def _group_of(self, answer: str) -> _Group | None:
        key = _key(answer)
        for group in self._groups:
            if group.key == key:
                return group
        if self.similar is None or key.numeric:
            return None
        for group in self._groups:
            if not group.key.numeric and self.similar(group.representative, answer):
                return group
        return None

    @property
    def leader(self) -> tuple[str, list[int]] | None:
        """The largest group's representative (its first answer as written) and sample indices; a tie goes to the
        group formed first. None before any answer."""
        if not self._groups:
            return None
        group = max(self._groups, key=lambda g: len(g.samples))
        return group.representative, list(group.samples)

    def counts(self) -> dict[str, int]:
        """Representative answer -> votes, largest first (ties in the order the groups formed)."""
        ordered = sorted(self._groups, key=lambda g: len(g.samples), reverse=True)
        return {group.representative: len(group.samples) for group in ordered}

    def majority(self, samples: int) -> bool:
        """Whether the leader holds more than half of `samples` votes (the number of samples decoded, answered or
        not): no later sample can change the winner then."""
        leader = self.leader
        return leader is not None and 2 * len(leader[1]) > samples
