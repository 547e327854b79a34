"""The text rules of the tool-integrated reasoning (TIR) loop (docs/environments.md §8; spec
environments §5): the prompt, where a response is cut, what code runs and what the model reads
back.

* :func:`build_prompt`: the instructions, then ``User Question:`` and the question; the policy
  puts it in one user message with the chat template.
* :func:`cut_response`: a response ends right after its **first** fenced code block
  (```` ```python ````, ```` ```py ```` or a bare fence, then a newline, the code, a newline and
  the closing fence); the text before the block is kept, the text after it is dropped.
* :func:`turn_kind`: ``answer`` when the (cut) response writes ``\\boxed{``, else ``code`` when it
  has a code block, else ``void`` (neither: the episode ends and the turn counts as void).
* :func:`program`: the code with the ``final_answer`` helper in front; ``final_answer(x)`` prints
  ``\\boxed{x}``.
* :func:`observation`: ``"\\nCode execution result: " + body + "\\n"``, where the body is the last
  line of stderr when stderr is not empty (``Timeout`` for a run the wall clock stopped), else
  stdout; either is cut to :data:`MAX_RESULT_CHARS` characters by keeping its head and tail.
"""

from __future__ import annotations

import re

CODE_BLOCK = re.compile(r"```(?:py|python)?\n(.*?)\n```", re.DOTALL)
BOXED = "\\boxed{"
MAX_RESULT_CHARS = 512
RESULT_PREFIX = "\nCode execution result: "
TRUNCATION_MARK = "\n...\n"

PROMPT_PREFIX = (
    "Solve the following problem step by step. While reasoning you may write executable Python "
    "code; an external sandbox runs it and returns its output after "
    '"Code execution result: ". Each code block must be a complete script: import what it '
    "uses and print() the values you want to see. Wrap the code in triple backticks, like "
    "this:\n"
    "```python\n"
    "import sympy as sp\n"
    "x = sp.symbols('x')\n"
    "print(sp.solve(x**2 - 4, x))\n"
    "```\n"
    "To give your final answer from code, call final_answer(value), for example:\n"
    "```py\n"
    "final_answer(42)\n"
    "```\n"
    "Or write the final answer in the form \\boxed{answer} at the end of your solution.\n\n"
    "User Question:\n"
)

# The compact prompt of tiny CPU runs: the same contract in one line.
COMPACT_PREFIX = (
    "Solve it. Python in ```python blocks runs; final_answer(x) prints \\boxed{x}.\n"
    "User Question:\n"
)

FINAL_ANSWER_HELPER = 'def final_answer(result):\n    print(f"\\\\boxed{{{result}}}")\n\n'


def build_prompt(question: str, prefix: str = PROMPT_PREFIX) -> str:
    """The user message: ``prefix`` (the paper's :data:`PROMPT_PREFIX`) + the question."""
    return prefix + question


def first_code_block(text: str) -> re.Match[str] | None:
    """The first fenced code block of ``text`` (:data:`CODE_BLOCK`), or None."""
    return CODE_BLOCK.search(text)


def cut_response(text: str) -> str:
    """``text`` up to the end of its first fenced code block (unchanged without one)."""
    block = first_code_block(text)
    return text if block is None else text[: block.end()]


def turn_kind(response: str) -> str:
    """``answer`` (writes ``\\boxed{``), ``code`` (has a code block) or ``void`` (neither)."""
    if BOXED in response:
        return "answer"
    return "code" if first_code_block(response) is not None else "void"


def program(response: str) -> str:
    """The script a ``code`` turn runs: the ``final_answer`` helper + its first block's code."""
    block = first_code_block(response)
    if block is None:
        raise ValueError("program() needs a response with a fenced code block")
    return FINAL_ANSWER_HELPER + block.group(1) + "\n"


def head_tail(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    """``text`` when at most ``limit`` characters, else its head and tail around
    :data:`TRUNCATION_MARK`, ``limit`` characters in all."""
    if len(text) <= limit:
        return text
    keep = limit - len(TRUNCATION_MARK)
    head = keep // 2
    return text[:head] + TRUNCATION_MARK + text[len(text) - (keep - head) :]


def result_body(status: str, stdout: str, stderr: str) -> str:
    """What the model reads of one run: ``Timeout``; else the last non-empty stderr line; else
    stdout; a run killed without a word says ``Killed``. Cut by :func:`head_tail`."""
    if status == "timeout":
        return "Timeout"
    lines = [line for line in stderr.splitlines() if line.strip()]
    if lines:
        return head_tail(lines[-1])
    if status == "killed" and not stdout.strip():
        return "Killed"
    return head_tail(stdout)


def observation(status: str, stdout: str, stderr: str) -> str:
    """``"\\nCode execution result: " + result_body(...) + "\\n"``."""
    return RESULT_PREFIX + result_body(status, stdout, stderr) + "\n"
