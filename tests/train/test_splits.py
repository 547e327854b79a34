"""Train, validation and test splits: declared by every environment, disjoint, picked by
``trainer.eval_split``, named in the held-out files, and a sweep's choices never read test.

Numbers come from the seed ranges in ``arlarena_jax.train.build`` (the test block keeps the
evaluation seeds runs used before the splits existed, so their results stay comparable)."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arlarena_jax.arena import plan, spec
from arlarena_jax.errors import ConfigError
from arlarena_jax.train import build
from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.held_out import evaluated_steps, held_out_path, run_change, split_dir
from envs import registry
from envs.math.spec import carve_dev
from envs.webshop.catalogue import load_catalogue
from envs.webshop.goals import synthetic_goals
from envs.webshop.synthetic import write_synthetic_catalogue

ROOT = Path(__file__).resolve().parents[2]
SOKOBAN = ROOT / "configs" / "sokoban" / "base_tiny.yaml"


def test_every_builtin_environment_declares_the_three_splits():
    for name in registry.names():
        assert registry.get(name).splits == ("train", "validation", "test"), name


def test_an_undeclared_eval_split_is_one_line_naming_the_splits():
    with pytest.raises(ConfigError) as info:
        load_config(SOKOBAN, ["trainer.eval_split=dev"])
    message = str(info.value)
    assert "\n" not in message
    assert message == (
        "config key 'trainer.eval_split': 'dev' is not a split of environment 'sokoban' "
        "(its splits: train, validation, test)"
    )


def test_seed_split_environments_evaluate_disjoint_seed_blocks():
    """Test seeds are the pre-split evaluation seeds (2^31 + 2^20 + eval_seed + i); validation
    and train-fit seeds sit in blocks of their own, so no two splits share a seed."""
    test = build.eval_seeds(load_config(SOKOBAN, ["trainer.eval_episodes=4"]), "test")
    assert test == [2**31 + 2**20 + i for i in range(4)]
    config = load_config(SOKOBAN, ["trainer.eval_episodes=4", "env.eval_seed=7"])
    seeds = {split: set(build.eval_seeds(config, split)) for split in registry.SPLITS}
    assert seeds["validation"] == {2**31 + 2**30 + 7 + i for i in range(4)}
    assert not seeds["train"] & seeds["validation"] and not seeds["validation"] & seeds["test"]
    assert all(max(s) < 2**32 for s in seeds.values())
    default = load_config(SOKOBAN, ["trainer.eval_episodes=4", "trainer.eval_split=validation"])
    assert build.eval_seeds(default) == build.eval_seeds(default, "validation")


def test_eval_seeds_past_their_block_are_refused():
    with pytest.raises(ConfigError, match=r"'env\.eval_seed': .*past its split's block"):
        load_config(SOKOBAN, [f"env.eval_seed={2**29}"])


@given(
    st.dictionaries(st.sampled_from(registry.SPLITS), st.frozensets(st.integers(0, 30)), min_size=1)
)
def test_overlaps_lists_exactly_the_pairs_that_share_an_episode(members):
    found = {(a, b) for a, b, _ in registry.overlaps(members)}
    for a in members:
        for b in members:
            ordered = registry.SPLITS.index(a) < registry.SPLITS.index(b)
            if ordered:
                assert ((a, b) in found) == bool(members[a] & members[b])


def test_overlapping_splits_are_refused_at_start_up_in_one_line():
    members = {"train": {"g1", "g2"}, "validation": {"g3"}, "test": {"g2"}}
    toy = dataclasses.replace(registry.get("sokoban"), split_members=lambda env: members)
    with pytest.raises(ConfigError) as info:
        registry.check_disjoint(toy, SimpleNamespace())
    assert str(info.value) == (
        "environment 'sokoban': splits 'train' and 'test' overlap (e.g. g2): "
        "the splits must be disjoint"
    )
    members["test"] = {"g4"}
    registry.check_disjoint(toy, SimpleNamespace())  # disjoint: no error


def test_webshop_goal_splits_keep_the_original_test_goals_and_are_disjoint(tmp_path):
    catalogue = load_catalogue(write_synthetic_catalogue(tmp_path, num_products=60))
    before = synthetic_goals(catalogue, seed=0, test_size=20)
    goals = synthetic_goals(catalogue, seed=0, test_size=20, validation_size=10)
    assert goals.test == before.test  # the test split is unchanged by carving validation
    assert goals.validation == before.train[:10] and goals.train == before.train[10:]
    assert len(goals.test) + len(goals.validation) + len(goals.train) == len(goals.goals)


def test_math_dev_set_is_carved_by_question_and_keeps_repeats_on_one_side():
    problem = SimpleNamespace
    problems = tuple(problem(question=f"q{i % 7}", id=str(i)) for i in range(21))
    train, dev = carve_dev(problems, 2)
    dev_questions = {p.question for p in dev}
    assert len(dev_questions) == 2 and len(dev) == 6  # each question appears 3 times
    assert not dev_questions & {p.question for p in train}
    assert carve_dev(problems, 2) == (train, dev)  # the same carving every time
    with pytest.raises(ConfigError, match=r"'env\.math\.validation_problems': 7 dev problems"):
        carve_dev(problems, 7)


def test_held_out_files_name_their_split_and_old_runs_read_as_test(tmp_path):
    new, old = tmp_path / "new", tmp_path / "old"
    assert held_out_path(new, 3, "validation") == new / "held_out" / "validation" / (
        "step_000003.jsonl"
    )
    for step, won in ((0, False), (8, True)):
        path = old / "held_out" / f"step_{step:06d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"seed": 1, "won": won, "return": 0.0}) + "\n")
    assert split_dir(old, "test") == old / "held_out"  # flat: read as the test split's
    assert split_dir(new, "test") == new / "held_out" / "test"
    assert evaluated_steps(old, "test") == [0, 8] and evaluated_steps(old, "validation") == []
    assert run_change(old, "test").change == 1.0


def _sweep(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        f"base: {SOKOBAN}\nout: {tmp_path / 'runs'}\nstarts: {tmp_path / 'starts'}\n"
        + textwrap.dedent(body)
    )
    return path


def test_a_sweep_whose_selection_reads_test_is_refused_in_one_line(tmp_path):
    path = _sweep(tmp_path, "seeds: [0]\nprotocol: {select_on: test}\n")
    with pytest.raises(ConfigError) as info:
        spec.load_sweep(path)
    assert str(info.value) == (
        f"sweep file {str(path)!r}: key 'protocol.select_on': a sweep's choices read the "
        "validation split, never the test split"
    )
    both = _sweep(tmp_path, "protocol: {}\noverrides: {trainer.eval_split: test}\n")
    with pytest.raises(ConfigError, match=r"'overrides\.trainer\.eval_split': .* protocol"):
        spec.load_sweep(both)


def test_a_protocol_evaluates_on_validation_and_tests_each_final_policy_once(tmp_path):
    sweep = spec.load_sweep(_sweep(tmp_path, "seeds: [0, 1]\nprotocol: {}\n"))
    assert sweep.protocol == spec.Protocol("validation", "final")
    assert sweep.evaluate_on == {"test": {"trainer.eval_split": "test"}}
    runs = plan.plan(sweep)
    assert [load_config(SOKOBAN, r.overrides).trainer.eval_split for r in runs] == [
        "validation",
        "validation",
    ]


def test_a_run_evaluating_on_validation_keeps_its_outcomes_under_that_split(tmp_path):
    """A tiny Sokoban run (no cloning, no RL: the step-0 evaluation only) with
    ``trainer.eval_split=validation`` plays the validation seeds and writes
    ``held_out/validation/step_000000.jsonl``, nothing under the test split; its TensorBoard
    tags name the split (``validation/success_rate``)."""
    from arlarena_jax.train.held_out import read_records
    from arlarena_jax.train.loop import train

    overrides = [
        "sft.enabled=false",
        "trainer.total_steps=0",
        "trainer.eval_episodes=2",
        "env.eval_batch_size=2",
        "env.max_turns=2",
        "trainer.eval_split=validation",
        "trainer.export_hf=false",
        f"trainer.run_dir={tmp_path}",
    ]
    config = load_config(ROOT / "configs" / "sokoban" / "sampo_tiny.yaml", overrides)
    train(config, console=False)
    records = read_records(held_out_path(tmp_path, 0, "validation"))
    assert [r["seed"] for r in records] == build.eval_seeds(config, "validation")
    assert evaluated_steps(tmp_path, "test") == []
    from arlarena_jax.train.metrics import read_scalars

    tags = read_scalars(tmp_path / "tensorboard")
    assert "validation/success_rate" in tags and not any(t.startswith("val/") for t in tags)


def test_a_search_protocol_runs_no_test_evaluation(tmp_path):
    sweep = spec.load_sweep(_sweep(tmp_path, "seeds: [0]\nprotocol: {end_point: none}\n"))
    assert sweep.evaluate_on == {} and sweep.overrides["trainer.eval_split"] == "validation"
    with pytest.raises(ConfigError, match=r"'protocol\.end_point': final .* or none"):
        spec.load_sweep(_sweep(tmp_path, "seeds: [0]\nprotocol: {end_point: best}\n"))


@given(st.sampled_from(registry.SPLITS), st.from_regex(r"[a-z_/]{1,20}", fullmatch=True))
def test_evaluation_tags_name_their_split_and_read_back(split, name):
    """An evaluation metric ``val/x`` is logged as ``<split>/x`` and read back as ``val/x``; any
    other tag passes both ways unchanged."""
    from arlarena_jax.train.metrics import evaluation_key, split_tag

    assert split_tag(f"val/{name}", split) == f"{split}/{name}"
    assert evaluation_key(split_tag(f"val/{name}", split), split) == f"val/{name}"
    assert split_tag(f"actor/{name}", split) == f"actor/{name}"
    assert evaluation_key(f"actor/{name}", split) == f"actor/{name}"
    assert split_tag(f"val/{name}", None) == f"val/{name}"  # no split: as before
