"""Environments stepped in the host worker pool by several ``jax.distributed`` processes
(issue 65): each process opens a pool for only its block of the groups.

TextWorld (the real engine), the tiny model, from an empty game folder: two processes build the
games once (process 0 builds, the others then find them: two processes writing one game file at
once would corrupt it) and train; one process then trains on the same games, and both runs play
the same episodes (tests/helpers/process_runs.py states what "the same" means and its tolerance).

Tool-integrated math, the real sandbox: one snippet times out on process 1 alone (a slow host,
tests/helpers/slow_sandbox.py); the processes still hold the same whole rollout, and the run
completes. Needs ../shared/data/math (or $ARLARENA_MATH_DATA): skipped with the reason without.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.process_runs import arlarena, assert_same_run
from tests.helpers.processes import ROOT, tail

SLOW_SANDBOX = ROOT / "tests" / "helpers" / "slow_sandbox.py"


TEXTWORLD = [
    "configs/textworld/sampo_tiny.yaml",
    "env.textworld.train_games=8",
    "env.textworld.validation_games=2",
    "env.textworld.test_games=4",
    "env.textworld.build_workers=1",
    "env.num_workers=1",  # one pool worker per process
    "env.train_batch_size=2",  # one group per process as 2
    "env.group_size=2",
    "env.max_turns=8",  # the walkthroughs of this tier's quests (4 steps) fit
    "env.history_length=0",  # the shortest prompts: the law does not need the history
    "env.eval_batch_size=2",
    "trainer.eval_episodes=4",
    "sft.num_episodes=4",
    "sft.steps=4",
    "sft.batch_size=8",  # 8 of the 16 expert turns a step (the tier's default: 32)
    "trainer.total_steps=1",
    "trainer.mini_batch_size=8",
    "trainer.micro_batch_size=4",
    "sampler.max_concurrent_decodes=4",
    "trainer.export_hf=false",
    "mesh.data=2",
    "mesh.fsdp=2",
]


def test_textworld_in_the_pool_as_two_processes_plays_what_one_plays(tmp_path):
    pytest.importorskip("textworld", reason="the TextWorld engine is not installed")
    games = tmp_path / "games"
    two, one = tmp_path / "two", tmp_path / "one"
    common = [*TEXTWORLD, f"env.data_path={games}"]
    outputs = arlarena(["train", *common, f"trainer.run_dir={two}"], 2)
    built = [out.count("generating") for out in outputs]
    assert built[0] > 0 and built[1] == 0, built  # process 0 built the games, alone
    manifests = sorted(games.rglob("manifest.json"))
    assert len(manifests) == 3  # train, validation, test
    arlarena(["train", *common, f"trainer.run_dir={one}"], 1)
    assert json.loads((two / "final.json").read_text())["complete"]
    assert_same_run(one, two)


MATH = [
    "configs/math/sampo_tiny.yaml",
    "env.math.test_files=[aime2024]",
    "env.math.sandbox_timeout_s=2",
    "env.train_batch_size=2",  # one group per process as 2
    "env.group_size=2",
    "env.max_turns=2",
    "env.eval_batch_size=30",
    "env.max_right_tokens=96",
    "sampler.max_new_tokens=32",
    "sampler.max_concurrent_decodes=4",
    "sft.num_episodes=4",
    "sft.steps=4",
    "trainer.total_steps=1",
    "trainer.eval_at_start=false",
    "trainer.mini_batch_size=4",
    "trainer.micro_batch_size=4",
    "mesh.data=2",
    "mesh.fsdp=2",
]


@pytest.mark.usefixtures("one_sandbox_at_a_time")
def test_math_with_a_sandbox_timeout_on_one_process_only_does_not_diverge(tmp_path):
    """The real sandbox times out one snippet on process 1 alone; both processes then hold the
    same whole rollout (the digest of every row they update on), which holds that observation,
    and the run completes."""
    from envs.math.data import default_data_dir

    if not (default_data_dir() / "aime2024.jsonl.gz").is_file():
        pytest.skip(f"{default_data_dir()} not found: set $ARLARENA_MATH_DATA to the math data")
    argv = ["train", *MATH, f"trainer.run_dir={tmp_path / 'run'}"]
    outputs = arlarena(argv, 2, script=SLOW_SANDBOX, extra={"SLOW_SANDBOX_PROCESS": "1"})
    slow = ["slow sandbox: the snippet ended 'timeout'" in out for out in outputs]
    assert slow == [False, True], tail(outputs)
    held = [[ln for ln in out.splitlines() if ln.startswith("whole rollout")] for out in outputs]
    assert held[0] and held[0] == held[1], held
    assert held[0][0].endswith("timeout=True"), held  # process 0 holds process 1's observation
    assert json.loads((tmp_path / "run" / "final.json").read_text())["complete"]
