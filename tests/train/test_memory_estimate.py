"""The start-up memory estimate (arlarena_jax/train/memory_estimate.py): its formulas on small
hand-computed cases, the issue's absurd group size refused in one line naming the key, and every
committed config accepted on the machines it is meant for."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import pytest
from flax import nnx

from arlarena_jax import cli
from arlarena_jax.arena.plan import plan
from arlarena_jax.arena.spec import load_sweep
from arlarena_jax.errors import ConfigError
from arlarena_jax.models.config import PRESETS
from arlarena_jax.models.fetch import EMBEDDED
from arlarena_jax.models.qwen import QwenForCausalLM
from arlarena_jax.train import memory_estimate as me
from arlarena_jax.train.config import MeshConfig
from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.resolution import resolve_run
from tests.helpers.sweeps import planned_without_results

ROOT = Path(__file__).parents[2]
SOKOBAN = str(ROOT / "configs/sokoban/sampo_tiny.yaml")
GIB = 2**30
CPU_HOST = me.Memory(24 * GIB)  # the development machine: 24 GiB, devices are its CPU
H100 = me.Memory(256 * GIB, 80 * GIB)  # one accelerator's memory per device
COMMITTED = sorted(p for p in (ROOT / "configs").glob("*/*.yaml") if p.parent.name != "sweeps")


def test_parameter_count_of_the_tiny_preset_by_hand_and_by_the_model():
    # tiny: vocab 512, H 128, I 512, 4 layers, 4 heads, 2 KV heads of 32, tied, q/k norms.
    # attention 128·(128 + 2·64) + 128·128 = 49,152; q/k norms 64; MLP 3·128·512 = 196,608;
    # two norms 256: 246,080 a layer; 4 layers + embeddings 512·128 + final norm 128.
    assert me.parameter_count(PRESETS["tiny"]) == 4 * 246_080 + 65_536 + 128 == 1_049_984
    model = QwenForCausalLM(PRESETS["tiny"], rngs=nnx.Rngs(0))
    leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    assert sum(x.size for x in leaves) == 1_049_984  # exact: the formula names every weight


def test_kv_cache_and_update_batch_of_the_tiny_sokoban_run_by_hand():
    config = load_config(SOKOBAN)  # 128 slots, prompts 96 + replies 24, turn rows
    terms = me.phases(config, PRESETS["tiny"])["one RL step"]
    kv = next(t for t in terms if t.what.startswith("the KV cache"))
    # slots · layers · (K and V) · KV heads · head width · tokens · float32
    assert kv.bytes == 128 * 4 * 2 * 2 * 32 * (96 + 24) * 4 == 31_457_280
    batch = next(t for t in terms if t.what.startswith("the update batch"))
    # 16 groups · 8 · 15 turns = 1,920 rows, padded to 2,048 (mini-batches of 512);
    # ids + mask int32 over 120 tokens, and 10 float32 [N, 24] arrays; env.device_rollout adds
    # the turn arrays, 15 turns · 128 episodes · (96 + 2·24) int32
    assert batch.bytes == 2048 * 120 * 8 + 2048 * 24 * 4 * 10 + 15 * 128 * 144 * 4 == 5_038_080
    rows = next(t for t in terms if t.what.startswith("the rollout's rows"))
    assert rows.host and rows.bytes == 2048 * 120 * 40


def test_state_copies_follow_the_objective_and_the_mesh():
    config = load_config(SOKOBAN)
    sharded = dataclasses.replace(config, mesh=MeshConfig(fsdp=4, tensor=2))
    size = me.parameter_count(PRESETS["tiny"]) * 4
    plain = me.state_terms(config, PRESETS["tiny"], training=True, reference=False, critic=False)
    kl = me.state_terms(sharded, PRESETS["tiny"], training=True, reference=True, critic=False)
    sampler = me.state_terms(config, PRESETS["tiny"], training=False, reference=True, critic=True)
    assert plain[0].bytes == 6 * size  # weights, 2 AdamW moments, 2 gradients, the sampler's
    assert kl[0].bytes == 7 * size and kl[0].shards == 8  # + reference; over fsdp · tensor
    assert sampler[0].bytes == size  # evaluation: the sampler's copy only


def test_the_issues_group_size_is_refused_in_one_line_naming_the_key():
    config = load_config(SOKOBAN, ["env.group_size=2000000000"])
    with pytest.raises(ConfigError, match=r"^config key 'env.group_size': one RL step needs") as e:
        me.check_memory(config, PRESETS["tiny"], CPU_HOST)
    assert "2000000000 trajectories" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"'env.group_size'.*int32"):  # the issue's 4e9
        load_config(SOKOBAN, ["env.group_size=4000000000"])


def test_the_cli_refuses_it_before_building_anything(tmp_path, capsys):
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        cli.main(["train", SOKOBAN, "env.group_size=2000000000", f"trainer.run_dir={run_dir}"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("arlarena: config key 'env.group_size': one RL step needs about")
    assert not run_dir.exists()  # refused before the run directory is made


# within the evaluation seeds' block of 2^29 (train.build): the config refuses more
BIG_EVAL = ["env.eval_batch_size=500000000", "trainer.eval_episodes=500000000"]


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["sampler.max_concurrent_decodes=10000000"], "sampler.max_concurrent_decodes"),
        (["trainer.micro_batch_size=4000000"], "trainer.micro_batch_size"),
        # evaluation plays min(eval_batch_size, eval_episodes) at once: the smaller is named
        ([*BIG_EVAL, "env.eval_batch_size=250000000"], "env.eval_batch_size"),
        ([*BIG_EVAL, "trainer.eval_episodes=250000000"], "trainer.eval_episodes"),
    ],
)
def test_other_sizes_name_their_own_key(overrides, key):
    config = load_config(SOKOBAN, ["trainer.mini_batch_size=4000000", *overrides])
    with pytest.raises(ConfigError, match=rf"^config key '{key}'"):
        me.check_memory(config, PRESETS["tiny"], CPU_HOST)


def test_cloning_and_evaluation_are_checked_without_rl():
    config = load_config(SOKOBAN, ["trainer.total_steps=0", "sft.batch_size=4000000"])
    with pytest.raises(ConfigError, match=r"^config key 'sft.batch_size': cloning needs"):
        me.check_memory(config, PRESETS["tiny"], CPU_HOST)
    me.check_memory(config, PRESETS["tiny"], CPU_HOST, training=False)  # `eval`: no cloning


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_committed_config_is_accepted_where_it_is_meant_to_run(path):
    config = load_config(path)
    model = resolve_run(config).architecture
    if config.model.path in EMBEDDED:  # a CPU config on the embedded model (fetched or not)
        model = PRESETS["smollm2-135m"]
    if config.model.path is None or config.model.path in EMBEDDED:
        # a CPU config: this host, its own memory and a 24 GiB one
        me.check_memory(config, model, CPU_HOST, reference=True, critic=True)
        me.check_memory(config, model, me.machine_memory(), reference=True, critic=True)
        return
    # a paper-scale config (its checkpoint is not downloaded here): Qwen3-4B's shape, per
    # device on the mesh it names, 80 GB accelerators. On this CPU host it never gets here:
    # its mesh needs 4 devices (and its model.path a download).
    model = PRESETS["qwen3-4b"]
    if config.env.name == "math":  # see the next test
        config = dataclasses.replace(
            config, sampler=dataclasses.replace(config.sampler, max_concurrent_decodes=128)
        )
    me.check_memory(config, model, H100, reference=True)


def test_the_math_paper_configs_kv_cache_fits_four_accelerators_at_64_slots():
    # 512 slots x (12,288 + 4,096) tokens x 36 layers x 2 x 8 KV heads x 128 x bfloat16 =
    # 1,152 GiB of KV cache, 288 GiB per device on mesh.fsdp=4: refused on 80 GB devices. The
    # committed config has 64 slots (144 GiB, 36 GiB per device): accepted.
    config = load_config(ROOT / "configs/math/sampo_qwen3_4b.yaml")
    kv = me.sampler_terms(config, PRESETS["qwen3-4b"])[0]
    assert kv.bytes == 64 * 16384 * 36 * 2 * 8 * 128 * 2 == 144 * GIB
    me.check_memory(config, PRESETS["qwen3-4b"], H100, reference=True)
    many = load_config(
        ROOT / "configs/math/sampo_qwen3_4b.yaml", ["sampler.max_concurrent_decodes=512"]
    )
    with pytest.raises(ConfigError, match=r"^config key 'sampler.max_new_tokens'.*KV cache"):
        me.check_memory(many, PRESETS["qwen3-4b"], H100, reference=True)
    wide = dataclasses.replace(many, mesh=MeshConfig(fsdp=16))
    me.check_memory(wide, PRESETS["qwen3-4b"], H100, reference=True)  # 16 devices: accepted


def test_an_unreadable_model_checks_the_rows_only():
    config = load_config(SOKOBAN, ["env.group_size=2000000000"])
    with pytest.raises(ConfigError, match=r"'env.group_size'"):
        me.check_memory(config, None, CPU_HOST)
    me.check_memory(load_config(SOKOBAN), None, CPU_HOST)


def test_several_processes_check_host_terms_only():
    memory = me.machine_memory(devices_known=False)
    assert memory.device_bytes == float("inf") and memory.host_bytes > 0


@pytest.mark.parametrize(
    "path", sorted((ROOT / "configs/sweeps").glob("*.yaml")), ids=lambda p: p.name
)
def test_every_committed_sweeps_runs_are_accepted_on_a_cpu_host(path, tmp_path):
    for run in plan(planned_without_results(load_sweep(path, out=tmp_path))):
        model = resolve_run(run.config).architecture
        me.check_memory(run.config, model, CPU_HOST, reference=True, critic=True)
