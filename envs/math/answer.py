"""Answer extraction for the math reward (spec environments §5, "Reward").

Our own re-implementation of the qwen-math evaluation toolkit's ``extract_answer(text, "math")``
(``qwen_math_eval_toolkit/parser.py``) as SimpleTIR/ARLArena's ``hf_math_verify.compute_score``
calls it. The rule, first match wins:

1. a box: the content of the **last** ``\\boxed``/``\\fbox`` command. ``\\boxed{...}`` takes the
   balanced-brace content (``\\boxed{\\frac{1}{2}}`` -> ``\\frac{1}{2}``); any other form
   (``\\boxed 5``, ``\\boxed5``) takes the text up to the next ``$`` or whitespace. If that last
   box is unterminated (``\\boxed{12`` at a truncated end) the rest of the text is taken, as the
   original does; earlier boxes are never consulted.
2. a phrase: the text after the last "he answer is" / "final answer is", up to the end of its
   line and the first sentence end, without ``$``.
3. the last number of the text with thousands commas removed (``-?\\d*\\.?\\d+``, plus simple
   fractions ``a/b``).
4. else ``""``.

Then, as the original: line breaks (with the indentation after them) are removed, one leading
``:`` and a trailing ``.``/``/`` are dropped. Departures from the original, all deliberate:

* the original's ``strip_string`` (units, ``\\text``, ``x=``, ``\\dfrac``, ``%``, ``$``...) is not
  applied: math-verify normalises all of these itself (``x=3`` verifies against ``3``);
* the box must be a ``\\boxed``/``\\fbox`` command (the original splits on the bare word "boxed",
  so prose like "I boxed it" counted), and ``\\fbox`` is recognised;
* the space form stops at whitespace (the original ran to the next ``$``);
* the later of the two phrases wins (the original preferred "he answer is" wherever it was), and
  the phrase answer stops at the end of its sentence (the original took the rest of the text);
* a last-number fallback keeps ``3/4`` whole (the original took ``4``);
* the Minerva "final answer is $X$. I hope" form is not checked before boxes (phrase rule 2 still
  reads it when there is no box).
"""

from __future__ import annotations

import re

__all__ = ["extract_answer", "has_boxed", "last_boxed"]

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_PHRASE = re.compile(r"(?:he|final) answer is")
_NUMBER = re.compile(r"-?\d+/\d+|-?\d*\.?\d+")
_SENTENCE_END = re.compile(r"\.(?=\s|$)")


def _balanced(text: str, start: int) -> tuple[str, bool]:
    """The content after the ``{`` at ``start`` up to its matching ``}``: (content, terminated).

    Unterminated: (the rest of the text, False).
    """
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], True
    return text[start + 1 :], False


def _last_box(text: str) -> tuple[str, bool] | None:
    """The last box command's (content, terminated), or None when the text has no box command."""
    matches = list(_BOX.finditer(text))
    if not matches:
        return None
    i = matches[-1].end()
    while i < len(text) and text[i] in " \t":
        i += 1
    if i < len(text) and text[i] == "{":
        return _balanced(text, i)
    match = re.match(r"[^\s$]*", text[i:])
    return (match.group(0) if match else ""), True


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}``/``\\fbox{...}`` (balanced braces) or ``\\boxed 5``.

    None when the text has no box, or when its last box is unterminated (earlier boxes are not
    consulted: the last box is the model's final answer). ``""`` for an empty box.
    """
    box = _last_box(text)
    if box is None or not box[1]:
        return None
    return box[0]


def has_boxed(text: str) -> bool:
    """Whether the text contains ``\\boxed{`` (the rollout's "done" test, spec §5)."""
    return "\\boxed{" in text


def _phrase_answer(text: str) -> str | None:
    """The text after the last "he answer is"/"final answer is" to its line/sentence end."""
    matches = list(_PHRASE.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end() :].lstrip().lstrip(":").lstrip()
    line = rest.split("\n", 1)[0]
    end = _SENTENCE_END.search(line)
    if end is not None:
        line = line[: end.start()]
    return line.replace("$", "").strip()


def _last_number(text: str) -> str:
    """The last number of the text with commas removed (``1,234`` -> ``1234``), else ``""``."""
    numbers = _NUMBER.findall(text.replace(",", ""))
    return numbers[-1] if numbers else ""


def _clean(answer: str) -> str:
    """The original's final touches: join lines, drop one leading ``:``, a trailing ``.``/``/``."""
    answer = re.sub(r"\n\s*", "", answer).strip()
    if answer.startswith(":"):
        answer = answer[1:].strip()
    if answer.endswith("."):
        answer = answer[:-1]
    if answer.endswith("/"):
        answer = answer[:-1]
    return answer.strip()


def extract_answer(text: str) -> str:
    """The model's final answer: last box, else the answer phrase, else the last number, else "".

    See the module docstring for the rule and its departures from the qwen-math toolkit.
    """
    text = text.replace("\u043a\u0438", "")  # the toolkit drops the PRM step tag "ки"
    box = _last_box(text)
    if box is not None:
        return _clean(box[0])
    phrase = _phrase_answer(text)
    if phrase is not None:
        return _clean(phrase)
    return _clean(_last_number(text))
