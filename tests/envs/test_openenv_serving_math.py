"""``arlarena serve math``, driven by OpenEnv's own client and compared with in-process stepping
turn by turn (docs/environments.md §15.1): three AIME 2024 problems of the test split, each a
code turn run in the real sandbox, then a ``\\boxed{}`` answer (one right, one wrong) or, on the
third, ``{"command": null}``: the end without a turn that the rollout sends once an episode's
reply budget is spent, scored as in process.

Needs the ``openenv`` extra, ../shared/data/math (or $ARLARENA_MATH_DATA) and a sandbox backend:
skipped with the reason without them.
"""

from __future__ import annotations

import pytest

pytest.importorskip("openenv", reason="serving tests need openenv (the openenv extra)")

from openenv.core.generic_client import GenericEnvClient

from arlarena_jax.train.build import EVAL_SEED_BLOCKS
from envs.math.data import default_data_dir
from tests.helpers.openenv_servers import (
    env_section,
    launch,
    listening,
    local_batch,
    same_turn,
    stop_server,
)

# Sandboxes share host-wide uids, and tests/envs/test_math_sandbox.py looks for their processes
# host-wide: under pytest-xdist one worker at a time runs such tests (tests/conftest.py).
pytestmark = [
    pytest.mark.usefixtures("one_sandbox_at_a_time"),
    pytest.mark.skipif(
        not (default_data_dir() / "aime2024.jsonl.gz").is_file(),
        reason=f"{default_data_dir()} not found: set $ARLARENA_MATH_DATA to the math data folder",
    ),
]

MATH_SETS = ("env.math.test_files=[aime2024]", "env.math.sandbox_timeout_s=5")
FENCE = "```"


def code_turn(code: str) -> str:
    return f"Let me compute.\n{FENCE}python\n{code}\n{FENCE}"


@pytest.fixture(scope="module")
def math_sets():
    """The sets, once the sandbox's isolation is known to be available (else a skip, saying
    why, as tests/envs/test_math_sandbox.py does)."""
    from envs.math.sandbox import SandboxUnavailable, resolve_isolation
    from envs.math.spec import sandbox_config

    try:
        resolve_isolation(sandbox_config(env_section("math", *MATH_SETS)))
    except SandboxUnavailable as exc:  # the machine: bubblewrap, util-linux, root or userns
        pytest.skip(str(exc))
    return MATH_SETS


def test_math_episodes_equal_in_process_stepping(math_sets):
    """Per test-panel index: a code turn (index 0 and 2 print, index 1 raises), then a boxed
    answer (index 0 the ground truth, index 1 a wrong one) or the end without a turn (index 2),
    served and in process side by side."""
    process = launch("math", "--split", "test", *(f"--set={s}" for s in math_sets))
    batch = local_batch("math", "test", *math_sets)
    first = EVAL_SEED_BLOCKS["test"]
    right = batch.problem_of(first).answer
    plans = {
        0: (code_turn("print(6 * 7)"), f"So the answer is \\boxed{{{right}}}."),
        1: (code_turn("print(1 / 0)"), "So the answer is \\boxed{-1}."),
        2: (code_turn("print(6 * 7)"), None),  # the reply budget spent: no answer given
    }
    server = listening(process)
    try:
        with GenericEnvClient(base_url=server.url).sync() as client:
            rewards, runs = [], []
            for index, plan in plans.items():
                seed = first + index
                served = client.reset(index=index)
                expected = batch.reset([seed])[0]
                assert served.observation["text"] == expected.text
                assert served.observation["seed"] == seed
                assert served.observation["admissible"] == list(expected.admissible)
                assert served.observation["task"] == expected.task
                for command in plan:
                    step = batch.step([command])
                    served = client.step({"command": command})
                    reward, done = float(step.rewards[0]), bool(step.dones[0])
                    same_turn(served, step.observations[0], reward, done, step.infos[0])
                    runs.append(step.infos[0].get("exec_status"))
                assert served.done
                rewards.append(served.reward)
        assert rewards == [1.0, 0.0, 0.0]  # the right answer wins, the wrong one and none do not
        assert runs == ["ok", None, "error", None, "ok", None]  # the code turns ran
    finally:
        batch.close()
        stop_server(server)
