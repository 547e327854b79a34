"""The tool-integrated math environment (docs/environments.md §8): the TIR text rules, the episode
logic with a stand-in executor and scorer, a few runs through the real sandbox, and a fuzz that
arbitrary model text never raises."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.math import tir
from envs.math.data import Problem
from envs.math.env import MathBatch
from envs.math.prompts import MATH_FORMAT, math_episode_metrics
from envs.math.sandbox import ExecResult, SandboxConfig, run_many, run_python
from envs.math.verify import Score
from envs.text import ScriptedPolicy

# Sandboxes share host-wide uids, and tests/envs/test_math_sandbox.py looks for their processes
# host-wide: under pytest-xdist one worker at a time runs such tests (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_sandbox_at_a_time")

PROBLEMS = (
    Problem(id="p0", question="What is 1+1?", answer="2", dataset="toy"),
    Problem(id="p1", question="Half of one?", answer="\\frac{1}{2}", dataset="toy"),
)
FENCE = "```"


def block(code: str, tag: str = "python") -> str:
    return f"{FENCE}{tag}\n{code}\n{FENCE}"


# --- text rules --------------------------------------------------------------------------------


def test_cut_keeps_the_text_up_to_the_first_block():
    text = "Think first.\n" + block("print(1)") + "\nthen more\n" + block("print(2)")
    assert tir.cut_response(text) == "Think first.\n" + block("print(1)")
    assert tir.cut_response("no code here") == "no code here"
    assert tir.cut_response(block("x = 1", "py") + "tail") == block("x = 1", "py")
    assert tir.cut_response(block("x = 1", "") + "tail") == block("x = 1", "")
    # an unclosed fence is no block
    assert tir.cut_response("```python\nprint(1)\n") == "```python\nprint(1)\n"


def test_turn_kinds():
    assert tir.turn_kind("so \\boxed{4}") == "answer"
    assert tir.turn_kind(block("print(4)") + " \\boxed{4}") == "answer"  # boxed wins: no run
    assert tir.turn_kind(block("print(4)")) == "code"
    assert tir.turn_kind("I give up") == "void"
    assert tir.turn_kind("```javascript\nx\n```") == "void"  # another language is no block


def test_program_prepends_final_answer():
    program = tir.program("see\n" + block("final_answer(3)"))
    assert program.startswith("def final_answer(result):")
    assert program.endswith("final_answer(3)\n")
    with pytest.raises(ValueError):
        tir.program("no block")


def test_head_tail_truncation():
    assert tir.head_tail("x" * 512) == "x" * 512
    text = "".join(chr(ord("a") + i % 26) for i in range(2000))
    cut = tir.head_tail(text)
    assert len(cut) == 512
    head, tail = cut.split(tir.TRUNCATION_MARK)
    assert text.startswith(head) and text.endswith(tail)
    assert (len(head), len(tail)) == (253, 254)


def test_observation_formats():
    assert tir.observation("ok", "4\n", "") == "\nCode execution result: 4\n\n"
    err = "Traceback (most recent call last):\n  File x\nZeroDivisionError: division by zero\n"
    assert tir.observation("error", "partial", err) == (
        "\nCode execution result: ZeroDivisionError: division by zero\n"
    )
    assert tir.observation("timeout", "half", "") == "\nCode execution result: Timeout\n"
    assert tir.observation("killed", "", "") == "\nCode execution result: Killed\n"
    long = tir.observation("ok", "9" * 5000, "")
    assert len(long) == len(tir.RESULT_PREFIX) + 512 + 1


# --- the real sandbox --------------------------------------------------------------------------

SANDBOX = SandboxConfig(timeout_s=3.0)


def test_final_answer_prints_boxed_in_the_sandbox():
    result = run_python(tir.program(block("final_answer(6 * 7)")), SANDBOX)
    assert result.status == "ok" and result.stdout == "\\boxed{42}\n"
    result = run_python(tir.program(block("final_answer('\\\\frac{1}{2}')")), SANDBOX)
    assert result.stdout == "\\boxed{\\frac{1}{2}}\n"


def test_sandbox_results_read_as_observations():
    programs = [
        tir.program(block(code))
        for code in ("print(2**10)", "1/0", "import time\ntime.sleep(60)", "print('é' * 3)")
    ]
    results = run_many(programs, SANDBOX)
    texts = [tir.result_body(r.status, r.stdout, r.stderr) for r in results]
    assert texts == ["1024\n", "ZeroDivisionError: division by zero", "Timeout", "ééé\n"]


# --- episodes with a stand-in executor and scorer ----------------------------------------------


def fake_execute(programs):
    """``final_answer(x)`` prints ``\\boxed{x}``; ``boom`` fails; anything else prints ``out``."""
    out = []
    for program in programs:
        code = program[len(tir.FINAL_ANSWER_HELPER) :]
        if call := re.fullmatch(r"final_answer\((.*)\)\n", code):
            value = call.group(1)
            out.append(ExecResult("ok", f"\\boxed{{{value}}}\n", "", 0, 0.0))
        elif "boom" in code:
            out.append(ExecResult("error", "", "NameError: boom\n", 1, 0.0))
        else:
            out.append(ExecResult("ok", "out\n", "", 0, 0.0))
    return out


def fake_score(text: str, ground_truth: str) -> Score:
    """Correct iff the last ``\\boxed{...}`` content equals the ground truth."""
    start = text.rfind("\\boxed{")
    answer = text[start + 7 : text.find("}", start)] if start >= 0 else ""
    return Score(answer == ground_truth, answer, start >= 0, False)


def make_batch(n, **kwargs):
    kwargs.setdefault("max_turns", 5)
    return MathBatch(PROBLEMS, n, execute=fake_execute, score=fake_score, **kwargs)


def test_episode_paths():
    batch = make_batch(4)
    obs = batch.reset([0, 0, 1, 0])
    assert obs[0].text == obs[0].task == "What is 1+1?" and obs[2].task == "Half of one?"
    step = batch.step([block("print(1)"), "\\boxed{2}", "no idea", block("final_answer(2)")])
    assert step.dones.tolist() == [False, True, True, True]
    assert step.observations[0].text == "\nCode execution result: out\n\n"
    assert step.rewards.tolist() == [0.0, 1.0, 0.0, 1.0]
    assert step.infos[2]["void_turn"] and step.infos[2]["exclude_from_loss"]
    assert step.infos[3]["code_turns"] == step.infos[3]["valid_code_turns"] == 1
    step = batch.step([block("boom"), None, None, None])
    assert step.observations[0].text == "\nCode execution result: NameError: boom\n"
    step = batch.step(["the answer is \\boxed{2}", None, None, None])
    assert step.dones.all() and step.rewards[0] == 1.0
    info = step.infos[0]
    assert (info["turns"], info["code_turns"], info["valid_code_turns"]) == (3, 2, 1)
    metrics = math_episode_metrics(info, info["won"])
    assert metrics == {
        "toy/accuracy": 1.0,
        "use_code": 1.0,
        "void_turn": 0.0,
        "turns": 3.0,
        "boxed": 1.0,
        "score_timeout": 0.0,
        "valid_code": 0.5,
    }


def test_turn_cap_ends_and_scores_the_episode():
    batch = make_batch(1, max_turns=2)
    batch.reset([0])
    assert not batch.step([block("print(1)")]).dones[0]
    step = batch.step([block("print(2)")])
    assert step.dones[0] and step.infos[0]["turns"] == 2 and step.rewards[0] == 0.0


def test_none_ends_without_a_turn_and_void_filter_can_be_off():
    batch = make_batch(2, remove_void_turns=False, avg_at=4)
    batch.reset([0, 1])
    step = batch.step([None, "words"])
    assert step.dones.all() and step.infos[0]["turns"] == 0
    assert not step.infos[1]["exclude_from_loss"] and step.infos[1]["void_turn"]
    assert "toy/avg_at_4" in math_episode_metrics(step.infos[1], False)


def flaky_score(text: str, ground_truth: str) -> Score:
    """``fake_score``, but the answer 9 finds the scorer dead (no verdict) and 8 times out."""
    score = fake_score(text, ground_truth)
    if score.extracted == "9":
        return Score(False, "9", True, failed=True)
    if score.extracted == "8":
        return Score(False, "8", True, timed_out=True)
    return score


def test_unscorable_answer_is_a_failure_but_a_timeout_is_not():
    """docs/environments.md §9.3: a scorer without a verdict is an infrastructure failure (the
    rollout masks the episode out of its group); a timeout is the answer's own 0."""
    from arlarena_jax.objectives.host import kept_rows
    from arlarena_jax.rollout import collect, rollout_metrics
    from arlarena_jax.rollout.trajectory import TrajectoryRows

    batch = MathBatch(PROBLEMS, 4, execute=fake_execute, score=flaky_score, max_turns=2)
    answers = ["\\boxed{2}", "\\boxed{9}", "\\boxed{8}", "\\boxed{3}"]
    policy = ScriptedPolicy(lambda prompts: answers[: len(prompts)])
    rows = TrajectoryRows()
    rollout = collect(
        batch, MATH_FORMAT, policy, group_seeds=[0], group_size=4, max_turns=2, rows=rows
    )
    assert [t.failed for t in rollout.trajectories] == [False, True, False, False]
    assert [r.failed for r in rollout.rows] == [False, True, False, False]
    infos = [t.info for t in rollout.trajectories]
    assert "failure" in infos[1] and "failure" not in infos[2] and infos[2]["score_timeout"]
    assert [t.episode_return for t in rollout.trajectories] == [1.0, 0.0, 0.0, 0.0]
    assert kept_rows(rollout.to_host_turns()).tolist() == [True, False, True, True]
    assert rollout_metrics(rollout)["rollout/failed_episodes"] == 1.0


def test_seed_picks_the_problem_and_format_projection():
    batch = make_batch(1)
    assert batch.problem_of(3) is PROBLEMS[1]
    assert MATH_FORMAT.project("x", None).format_valid is False
    assert MATH_FORMAT.project(block("1"), None).action == block("1")
    assert MATH_FORMAT.build_prompt(None, "Q?", None) == tir.PROMPT_PREFIX + "Q?"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=300)), min_size=5, max_size=5))
def test_arbitrary_text_never_raises(responses):
    batch = make_batch(1)
    batch.reset([1])
    for response in responses:
        text = None if response is None else MATH_FORMAT.cut_response(response)
        step = batch.step([text])
        assert step.rewards.dtype == np.float32
        if step.dones[0]:
            assert "turns" in step.infos[0]
            break


PIECES = [*"ab1 \n`{}\\()'\"", "```python\n", "\n```", "\\boxed{", "final_answer("]
FUZZ_TEXT = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)


@settings(max_examples=60, deadline=None)
@given(FUZZ_TEXT)
def test_fenced_fuzz_never_raises(text):
    batch = make_batch(1)
    batch.reset([0])
    step = batch.step([MATH_FORMAT.cut_response(text)])
    assert step.observations[0].text == "" or step.observations[0].text.startswith(
        tir.RESULT_PREFIX
    )
