"""On-device rollout: a whole multi-turn episode batch of a JAX-native environment as one jitted
program (docs/environments.md §1.10).

For an environment that declares :attr:`envs.registry.EnvSpec.device_env` (Sokoban with the
compact prompt), each turn of a ``lax.while_loop`` over turns:

1. renders every live episode's prompt ids from its state (:attr:`envs.device.DeviceEnv.prompt`),
2. prefills them, draws each first token, then decodes in a ``lax.while_loop`` until every reply
   has stopped (a stop token, the stop string in the reply's bytes, or the budget),
3. projects each reply's bytes onto an action (an unreadable reply is the invalid action, as on
   the host) and steps the environments; finished episodes are masked and no longer prompted.

It samples exactly as the host path does: the same engine decode step, and the same keys. The
host computes the seed table ``[n, max_turns]``
(:func:`~arlarena_jax.rollout.keys.episode_seed_table`: the batch's sample seed, each episode's
global trajectory id, the turn) and passes it in as an int32 array; episode i's key at turn t is
the driver's key of a request seeded ``table[i, t]``. Given the same parameters it therefore
plays the same trajectories as :func:`arlarena_jax.rollout.loop.collect`, up to float rounding
between differently shaped programs. The host receives the turn arrays once and builds the same
:class:`Rollout` rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from arlarena_jax.device_turn import in_turn
from arlarena_jax.rollout.keys import draw_sample_seed, episode_seed_table
from arlarena_jax.rollout.loop import Rollout, TurnRow, _finish, check_batch_size, row_place
from arlarena_jax.rollout.policy import SamplerPolicy
from arlarena_jax.row_chunks import largest_divisor_at_most, map_row_chunks
from arlarena_jax.sampler.driver import find_stop
from arlarena_jax.sampler.engine import DecodeState, Engine, fill_slots
from arlarena_jax.sampler.sampling import GREEDY, SamplingParams, sample
from arlarena_jax.tokenization.token_bytes import token_byte_table
from envs.device import DeviceEnv, find_first
from envs.text import TaskFormat

Array = jax.Array


class TurnArrays(NamedTuple):
    """Every turn of every episode, ``[max_turns, n, …]`` (rows where ``active`` is False are
    turns an episode did not take)."""

    active: Array  # bool: the episode was live at this turn (it has a row)
    observation: Array  # the observation the prompt was rendered from
    step_shown: Array  # int32: the prompt's 1-based step
    last_action: Array  # int32: the prompt's last action (−1: none)
    prompt: Array  # int32 [P] prompt ids
    prompt_length: Array  # int32
    response: Array  # int32 [R] reply ids (the stop token included)
    log_probs: Array  # float32 [R] behaviour log-probs
    response_length: Array  # int32
    text_length: Array  # int32: reply bytes up to the end of the first stop string
    action: Array  # int32
    action_valid: Array  # bool
    reward: Array  # float32
    won: Array  # bool
    effective: Array  # bool


class _Reply(NamedTuple):
    """One turn's decoding state besides the engine's."""

    tokens: Array  # [n, R]
    log_probs: Array  # [n, R]
    text: Array  # [n, W] uint8 reply bytes
    text_length: Array  # [n]
    stopped_at: Array  # [n] end of the first stop string in bytes (−1: none yet)


class DeviceRollout:
    """The on-device rollout of one environment with one policy's engine (see module doc)."""

    def __init__(
        self,
        env: DeviceEnv,
        engine: Engine,
        tokenizer: Any,
        *,
        stop_strings: Sequence[str],
        max_turns: int,
        history_length: int,
    ):
        if len(stop_strings) > 1:
            raise ValueError("the on-device rollout takes at most one stop string")
        if not 0 <= env.shared_prefix < env.prompt_width:
            raise ValueError(
                f"the environment's shared_prefix {env.shared_prefix} is outside 0 … prompt "
                f"width {env.prompt_width} − 1"
            )
        self.env, self.engine, self.tokenizer = env, engine, tokenizer
        self.max_turns, self.history_length = max_turns, history_length
        self.stop_strings = tuple(stop_strings)
        self.stop = stop_strings[0].encode() if stop_strings else b""
        table, lengths = token_byte_table(tokenizer, engine.model_config.vocab_size)
        self.byte_table, self.byte_lengths = jnp.asarray(table), jnp.asarray(lengths)
        self.traces = 0
        self._play = jax.jit(self._play_impl, static_argnames=("sampling",))

    def play(
        self, policy: SamplerPolicy, seeds: Sequence[int], turn_seeds: np.ndarray, *, training: bool
    ) -> TurnArrays:
        """Play one episode per seed (room ``key(seed)``) with ``policy``'s parameters and
        sampling, episode i's turn t sampled from ``turn_seeds[i, t]`` (int32 ``[n, max_turns]``,
        :func:`~arlarena_jax.rollout.keys.episode_seed_table`), and return the turn arrays
        (host)."""
        sampling = policy.train_sampling if training else policy.eval_sampling
        out = in_turn(  # the device turn: asynchronous RL's trainer dispatches meanwhile
            self._play,
            policy.engine.params,
            jnp.asarray(np.asarray(seeds, np.int64).astype(np.uint32)),
            jnp.asarray(turn_seeds, jnp.int32),
            sampling=sampling,
        )
        out = jax.device_get(out)
        longest = int(out.prompt_length.max(initial=0))
        if longest > self.env.prompt_width:
            raise ValueError(
                f"a prompt has {longest} tokens, over the environment's prompt width "
                f"{self.env.prompt_width} (prompts are never truncated)"
            )
        return out

    def collect(
        self,
        envs: Any,
        task_format: TaskFormat,
        policy: SamplerPolicy,
        *,
        group_seeds: Sequence[int],
        group_size: int,
        max_turns: int,
        history_length: int = 2,
        training: bool = True,
        group_offset: int = 0,
        rows: Any = None,
        skip_done: bool = True,
        sample_seed: int | None = None,
    ) -> Rollout:
        """:func:`arlarena_jax.rollout.loop.collect`, played on device (``envs`` only fixes the
        batch size: the episodes live on device). Like the host loop it draws the policy's next
        sample seed (once) unless ``sample_seed`` is given."""
        n = check_batch_size(envs, group_seeds, group_size)
        if (max_turns, history_length) != (self.max_turns, self.history_length) or rows:
            raise ValueError(
                "this on-device rollout was built for max_turns "
                f"{self.max_turns}, history_length {self.history_length} and turn rows"
            )
        if sample_seed is None:
            sample_seed = draw_sample_seed(policy)
        first = group_offset * group_size  # environment i plays trajectory first + i
        table = episode_seed_table(sample_seed, range(first, first + n), self.max_turns)
        seeds = [s for s in group_seeds for _ in range(group_size)]
        turns = self.play(policy, seeds, table, training=training)
        per_env = turn_rows(self, turns, group_size, group_offset, task_format.data_source)
        return _finish(per_env, group_size, group_offset, task_format)

    # ---- the program ----------------------------------------------------------------------
    def _play_impl(self, params, seeds: Array, turn_seeds: Array, sampling: SamplingParams):
        self.traces += 1
        env, n = self.env, seeds.shape[0]
        states = jax.vmap(env.reset)(seeds)
        out = _empty_turns(self, states, n)
        carry = (jnp.int32(0), states, jnp.zeros(n, bool), jnp.full(n, -1, jnp.int32), out)

        def cond(c):
            turn, _, done, _, _ = c
            return (turn < self.max_turns) & ~done.all()

        def body(c):
            turn, states, done, last, out = c
            row, states, step_done = self._turn(
                params, states, ~done, turn, last, turn_seeds[:, turn], sampling
            )
            row = row._replace(active=~done)
            out = jax.tree.map(lambda buf, x: buf.at[turn].set(x), out, row)
            last = jnp.where(done, last, row.action)
            return turn + 1, states, done | step_done, last, out

        return jax.lax.while_loop(cond, body, carry)[-1]

    def _turn(self, params, states, live, turn, last, request_seeds, sampling):
        """One turn for every episode (finished ones masked): prompt, reply, projection, step;
        episode i samples from ``request_seeds[i]``."""
        env = self.env
        observation = jax.vmap(env.observe)(states)
        with_history = (turn > 0) & (self.history_length > 0)
        step_shown = jnp.where(with_history, turn + 1, 1) * jnp.ones_like(last)
        shown_last = jnp.where(with_history, last, -1)
        prompt, prompt_length = jax.vmap(env.prompt)(observation, step_shown, shown_last)
        keys = _request_keys(request_seeds)
        reply, emitted = self._live_replies(params, prompt, prompt_length, keys, live, sampling)
        action, valid = jax.vmap(env.project)(reply.text, reply.text_length)
        action = jnp.where(live, action, 0)
        states, reward, done, won, effective = jax.vmap(env.step)(states, action)
        row = TurnArrays(
            live, observation, step_shown, shown_last, prompt, prompt_length, reply.tokens,
            reply.log_probs, emitted, reply.text_length, action, valid & live, reward, won,
            effective,
        )  # fmt: skip
        return row, states, done

    def _live_replies(self, params, prompt, prompt_length, keys, live, sampling):
        """:meth:`_reply` over the live rows only, gathered to the front of the smallest batch
        size (n, n/2, n/4, n/8) that holds them (a ``lax.switch``: one program per size), then
        scattered back; finished rows get empty replies. Rows are independent, so this changes
        which rows are computed, not what a live row gets."""
        n = prompt.shape[0]
        sizes = [n >> j for j in range(4) if n % (1 << j) == 0 and (n >> j) >= 8] or [n]
        order = jnp.argsort(~live, stable=True)  # live rows first, in order

        def run(k: int):
            def branch():
                rows = order[:k]
                reply, emitted = self._slot_batches(
                    params, prompt[rows], prompt_length[rows], keys[rows], live[rows], sampling
                )
                blank = jax.tree.map(lambda x: jnp.zeros((n, *x.shape[1:]), x.dtype), reply)
                full = jax.tree.map(lambda b, x: b.at[rows].set(x), blank, reply)
                return full, jnp.zeros(n, emitted.dtype).at[rows].set(emitted)

            return branch

        count = jnp.sum(live, dtype=jnp.int32)
        smallest = jnp.sum(jnp.asarray(sizes[1:], jnp.int32) >= count, dtype=jnp.int32)
        return jax.lax.switch(smallest, [run(k) for k in sizes])

    def _slot_batches(self, params, prompt, prompt_length, keys, live, sampling):
        """:meth:`_reply` over batches of at most ``max_concurrent_decodes`` rows (a
        ``lax.map``), the decode batch the host driver's slots allow: each batch decodes until
        its own replies have stopped, and a wider decode step is slower per row on a CPU
        (measured: 512 rows at once ran at 0.83× the host path's turns per second)."""
        k = prompt.shape[0]
        batch = largest_divisor_at_most(k, self.engine.config.max_concurrent_decodes)

        def one(*rows):
            return self._reply(params, *rows, sampling)

        return map_row_chunks(one, (prompt, prompt_length, keys, live), batch)

    def _prefill(self, params, prompt, prompt_length, keys):
        """The engine's prefill in chunks of rows (a ``lax.map``), at most
        ``prefill_batch_tokens`` padded tokens each, as the host driver batches prompts (on CPU
        32 prompts of ~128 tokens at a time beat 128 at once). The environment's
        ``shared_prefix`` leading ids, the same in every row of a turn, are prefilled once (from
        the first row) and the chunks run only the ids after them."""
        k, width = prompt.shape
        start = self.env.shared_prefix
        shared = self.engine._shared_cache(params, prompt[0, :start], width) if start else None
        chunk = largest_divisor_at_most(
            k, self.engine.config.prefill_batch_tokens // (width - start)
        )

        def one(*rows):
            return self.engine._prefill_rows(params, *rows, GREEDY, shared, start)

        return map_row_chunks(one, (prompt, prompt_length, keys), chunk)

    def _reply(self, params, prompt, prompt_length, keys, live, sampling) -> tuple[_Reply, Array]:
        """Prefill, draw the first tokens, then decode until every live reply has stopped.
        Returns the reply and its token count."""
        state, reply = self._start(params, prompt, prompt_length, keys, live, sampling)
        reply, generated = self._decode_all(self.engine._model(params), state, reply, sampling)
        cut = jnp.where(reply.stopped_at >= 0, reply.stopped_at, reply.text_length)
        return reply._replace(text_length=cut), generated

    def _start(self, params, prompt, prompt_length, keys, live, sampling):
        """The decode state after prefill (each row's first token drawn; finished rows done)
        and empty replies."""
        engine = self.engine
        n, budget = prompt.shape[0], engine.config.max_new_tokens
        prefix = self._prefill(params, prompt, prompt_length, keys)
        first_keys, slot_keys = engine._split_first(keys)
        first, first_lp = sample(prefix.logits, first_keys, sampling)
        rows = jnp.arange(n, dtype=jnp.int32)
        state = fill_slots(
            engine.free_slots(n), rows, prefix.cache, rows, prompt_length, first, first_lp,
            jnp.int32(budget), slot_keys,
        )  # fmt: skip
        width = (budget + 2) * self.byte_table.shape[1] + len(self.stop)  # slices never clamp
        reply = _Reply(
            jnp.zeros((n, budget), jnp.int32), jnp.zeros((n, budget), jnp.float32),
            jnp.zeros((n, width), jnp.uint8), jnp.zeros(n, jnp.int32), jnp.full(n, -1, jnp.int32),
        )  # fmt: skip
        return state._replace(done=~live), reply

    def _decode_all(self, model, state: DecodeState, reply: _Reply, sampling: SamplingParams):
        """Decode until every reply has stopped; returns the replies and their token counts.

        Most replies stop together and a few run on, so the batch decodes only while more than
        an eighth of its rows are live; the live rows (at most n/8) are then gathered into a
        batch of n/8 that decodes the rest, and scattered back. Rows decode independently (own
        cache, keys and budget), so this changes the batch a row is computed in, not its tokens.
        """
        small = state.done.shape[0] // 8
        state, reply = self._decode_while(model, state, reply, sampling, small)
        if small == 0:
            return reply, state.generated
        rows = jnp.argsort(state.done, stable=True)[:small]  # the live rows first

        def take(tree):
            return jax.tree.map(lambda x: x[rows], tree)

        part, part_reply = self._decode_while(model, take(state), take(reply), sampling, 0)
        reply = jax.tree.map(lambda x, y: x.at[rows].set(y), reply, part_reply)
        return reply, state.generated.at[rows].set(part.generated)

    def _decode_while(self, model, state: DecodeState, reply: _Reply, sampling, live_rows: int):
        """Decode steps (a ``lax.while_loop``) while more than ``live_rows`` rows are live."""

        def more(c):
            return jnp.sum(~c[0].done, dtype=jnp.int32) > live_rows

        def body(c):
            return self._decode(model, *c, sampling)

        return jax.lax.while_loop(more, body, (state, reply))

    def _decode(self, model, state: DecodeState, reply: _Reply, sampling: SamplingParams):
        """One engine decode step; its tokens appended to the replies, whose stop string ends
        them."""
        new, (token, valid, log_prob) = self.engine._decode_step(model, state, sampling)
        rows = jnp.arange(token.shape[0])
        at = jnp.where(valid, state.generated, reply.tokens.shape[1])  # invalid rows: dropped
        tokens = reply.tokens.at[rows, at].set(token, mode="drop")
        log_probs = reply.log_probs.at[rows, at].set(log_prob, mode="drop")
        piece = self.byte_table[token]
        grown = jnp.where(valid, self.byte_lengths[token], 0)
        text = jax.vmap(lambda t, p, at: jax.lax.dynamic_update_slice(t, p, (at,)))(
            reply.text, piece, reply.text_length
        )
        text = jnp.where(valid[:, None], text, reply.text)
        length = reply.text_length + grown
        stopped_at = reply.stopped_at
        if self.stop:  # a new occurrence overlaps the appended bytes: search only there
            m, span = len(self.stop), piece.shape[1] + len(self.stop) - 1
            begin = jnp.maximum(reply.text_length - (m - 1), 0)
            window = jax.vmap(lambda t, b: jax.lax.dynamic_slice(t, (b,), (span,)))(text, begin)
            found = jax.vmap(lambda w, n: find_first(w, n, self.stop))(window, length - begin)
            first = valid & (found >= 0) & (stopped_at < 0)
            stopped_at = jnp.where(first, begin + found + m, stopped_at)
            new = new._replace(done=new.done | first)
        return new, _Reply(tokens, log_probs, text, length, stopped_at)


def _request_keys(seeds: Array) -> Array:
    """The host driver's keys of requests with explicit seeds (``n=1``): ``split(key(seed),
    1)[0]`` per row."""
    return jax.vmap(lambda s: jax.random.split(jax.random.key(s), 1)[0])(seeds)


def _empty_turns(rollout: DeviceRollout, states, n: int) -> TurnArrays:
    """Zero buffers ``[max_turns, n, …]`` for the turn arrays."""
    t, width = rollout.max_turns, rollout.env.prompt_width
    budget = rollout.engine.config.max_new_tokens
    obs = jax.vmap(rollout.env.observe)(states)

    def z(shape, dtype):
        return jnp.zeros((t, n, *shape), dtype)

    return TurnArrays(
        z((), bool), z(obs.shape[1:], obs.dtype), z((), jnp.int32), z((), jnp.int32),
        z((width,), jnp.int32), z((), jnp.int32), z((budget,), jnp.int32),
        z((budget,), jnp.float32), z((), jnp.int32), z((), jnp.int32), z((), jnp.int32),
        z((), bool), z((), jnp.float32), z((), bool), z((), bool),
    )  # fmt: skip


def turn_rows(
    rollout: DeviceRollout, turns: TurnArrays, group_size: int, group_offset: int, source: str
) -> list[list[TurnRow]]:
    """The host rollout's rows, per episode, from the turn arrays."""
    env, tokenizer = rollout.env, rollout.tokenizer
    n = turns.active.shape[1]
    per_env: list[list[TurnRow]] = [[] for _ in range(n)]
    for t, i in zip(*np.nonzero(turns.active), strict=True):
        response = turns.response[t, i, : turns.response_length[t, i]].tolist()
        observation = turns.observation[t, i]
        per_env[i].append(
            TurnRow(
                prompt_ids=turns.prompt[t, i, : turns.prompt_length[t, i]].tolist(),
                response_ids=response,
                log_probs=turns.log_probs[t, i, : len(response)].tolist(),
                prompt=env.prompt_text(
                    observation, int(turns.step_shown[t, i]), int(turns.last_action[t, i])
                ),
                response=_reply_text(tokenizer, response, rollout.stop_strings),
                **row_place(int(i), group_size, group_offset),
                turn=int(t),
                anchor=env.anchor_text(observation),
                action=int(turns.action[t, i]),
                reward=float(turns.reward[t, i]),
                action_valid=bool(turns.action_valid[t, i]),
                format_valid=True,
                data_source=source,
                info={
                    "won": bool(turns.won[t, i]),
                    "action_is_effective": bool(turns.effective[t, i]),
                },
            )
        )
    return per_env


def _reply_text(tokenizer: Any, ids: list[int], stop_strings: Sequence[str]) -> str:
    """The host driver's reply text: decoded without special tokens, cut after the stop string."""
    text = tokenizer.decode(ids, skip_special_tokens=True)
    found = find_stop(text, stop_strings) if stop_strings else None
    return text if found is None else text[: found[1]]
