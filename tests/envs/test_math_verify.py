"""envs/math/verify.py: the binary math-verify reward and its timeout-enforcing worker."""

import json
import multiprocessing
import sys
import threading

import pytest

from envs.math.verify import Score, Scorer, is_correct

READY = json.dumps({"ready": True})
# A worker that says it is ready, then never answers.
HANGING = [sys.executable, "-c", f"import time; print({READY!r}, flush=True); time.sleep(60)"]
# A worker that says it is ready, then exits at once.
CRASHING = [sys.executable, "-c", f"print({READY!r}, flush=True)"]


@pytest.mark.parametrize(
    ("predicted", "truth"),
    [
        (r"\frac{1}{2}", "0.5"),
        ("1/2", "0.5"),
        (r"\frac{1}{2}", "1/2"),
        (r"\dfrac{1}{2}", r"\frac12"),
        (r"\sqrt{4}", "2"),
        ("x=3", "3"),  # math-verify takes the right side of an assignment
        ("3", "x=3"),
        ("033", "33"),  # AIME answers with leading zeros are the same integer
        ("33", "033"),
        ("1,234", "1234"),
        (r"5\text{ apples}", "5"),
        (r"\boxed{7}", "7"),  # an answer that already has \boxed is not wrapped again
        ("(1,2)", "(1, 2)"),
    ],
)
def test_equivalent(predicted, truth):
    assert is_correct(predicted, truth)


@pytest.mark.parametrize(
    ("predicted", "truth"),
    [("1/3", "0.33"), ("3", "4"), ("", "5"), ("5", ""), ("5.", "5"), ("}{", "1"), (r"\frac{", "1")],
)
def test_not_equivalent(predicted, truth):
    assert not is_correct(predicted, truth)


@pytest.fixture(scope="module")
def scorer():
    with Scorer() as s:
        yield s


def test_scorer_boxed(scorer):
    score = scorer.score("Let me compute ... so \\boxed{\\frac{1}{2}}", "0.5")
    assert score == Score(correct=True, extracted=r"\frac{1}{2}", boxed=True, timed_out=False)


def test_scorer_last_number_fallback(scorer):
    score = scorer.score("Code execution result: 204\nSo she walks 204", "204")
    assert score == Score(correct=True, extracted="204", boxed=False)
    assert not scorer.score("we get 12 apples and then 3.5", "12").correct


def test_scorer_empty_extraction_skips_the_worker(scorer):
    assert scorer.score("no numbers at all", "5") == Score(False, "", False)


def test_scorer_from_a_thread(scorer):
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(scorer.score(r"\boxed{2}", "2")))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert [r.correct for r in results] == [True] * 3


def test_own_scorer_in_a_new_thread():
    results = []

    def run():
        with Scorer() as s:
            results.append(s.score(r"\boxed{0.25}", r"\frac14"))

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=30)
    assert results and results[0].correct


def test_timeout_kills_the_worker_and_recovers():
    with Scorer(timeout_s=0.3, worker_command=HANGING) as s:
        score = s.score(r"\boxed{1}", "1")
        assert score == Score(correct=False, extracted="1", boxed=True, timed_out=True)
        assert not score.failed  # the answer's fault, not the infrastructure's
        assert (s.timeouts, s.failures) == (1, 0)
        assert s._proc is None  # killed; the next call starts a new worker
        s.worker_command = Scorer().worker_command  # the real worker from now on
        assert s.score(r"\boxed{1}", "1").correct
        assert (s.timeouts, s.failures) == (1, 0)


def test_crashing_worker_is_a_failure_not_an_exception():
    with Scorer(timeout_s=5.0, worker_command=CRASHING) as s:
        score = s.score(r"\boxed{1}", "1")
        assert score == Score(correct=False, extracted="1", boxed=True, failed=True)
        assert (s.timeouts, s.failures) == (0, 1)


@pytest.mark.parametrize(
    "command", [[sys.executable, "-c", "import sys; sys.exit(3)"], ["/nonexistent/python"]]
)
def test_worker_that_never_starts_is_a_failure(command):
    with Scorer(worker_command=command) as s:
        score = s.score("42", "42")
        assert not score.correct and score.failed and not score.timed_out
        assert s.failures == 1


def test_dead_worker_is_restarted_once(scorer):
    assert scorer.score(r"\boxed{3}", "3").correct
    scorer._proc.kill()
    scorer._proc.wait()
    assert scorer.score(r"\boxed{3}", "3").correct
    assert scorer.failures == 0


def test_close_is_idempotent_and_lazy_restart():
    s = Scorer()
    s.close()
    assert s.score(r"\boxed{1}", "1").correct
    s.close()
    s.close()
    assert s._proc is None
    del s


def _score_in_child(scorer, queue):
    queue.put(scorer.score(r"\boxed{\frac{3}{4}}", "0.75"))


def test_scorer_in_a_non_daemonic_spawned_process(scorer):
    """A (started) Scorer pickled into a spawned non-daemonic process starts its own worker."""
    assert scorer.score(r"\boxed{1}", "1").correct  # the parent's worker is running
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_score_in_child, args=(scorer, queue), daemon=False)
    child.start()
    result = queue.get(timeout=60)
    child.join(timeout=30)
    assert result.correct and child.exitcode == 0
    assert scorer.score(r"\boxed{2}", "2").correct  # the parent's worker is untouched


def test_a_real_sympy_hang_times_out():
    """math-verify would compute 9^(9^(9^9)) for ever: the worker is killed at the deadline."""
    with Scorer(timeout_s=1.0) as s:
        score = s.score(r"\boxed{9^{9^{9^{9}}}}", "1")
        assert score.timed_out and not score.correct and s.timeouts == 1
        assert s.score(r"\boxed{1}", "1").correct
