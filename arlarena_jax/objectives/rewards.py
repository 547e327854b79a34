"""Reward shapers that act on token rewards before the advantage estimator (docs/algorithms.md §2).

Each constructor returns a :class:`~arlarena_jax.objectives.compose.RewardShaper` whose
``fn(batch, state) -> (batch, state, metrics)`` is pure and jittable. :meth:`Objective.prepare`
has already placed the episode return R on the last response token of every real row
(``token_rewards``) and set ``step_reward_adjust`` to 0 before the shapers run, in order.
Every metric is a mean over real rows (``row_mask``), so padding rows never change a result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from arlarena_jax.objectives import kl as kl_estimators
from arlarena_jax.objectives.batch import TurnBatch
from arlarena_jax.objectives.compose import Metrics, RewardShaper, State
from arlarena_jax.objectives.declare import Input, means
from arlarena_jax.objectives.stats import last_token_onehot, masked_mean, row_lengths, row_mean

Array = jax.Array

KL_REWARD_COEF = "kl_reward_coef"  # the state key holding β of the KL-in-reward shaper


def _require(batch: TurnBatch) -> tuple[Array, Array]:
    """(token_rewards, step_reward_adjust) of a batch that ``Objective.prepare`` initialised."""
    if batch.token_rewards is None or batch.step_reward_adjust is None:
        raise ValueError(
            "reward shapers run inside Objective.prepare(batch): TurnBatch.token_rewards / "
            "step_reward_adjust are None"
        )
    return batch.token_rewards, batch.step_reward_adjust


def _row_mean_of(values: Array, row_mask: Array) -> Array:
    """Mean of a per-row quantity over real rows: Σ x·w / (Σ w + 1e-8)."""
    return masked_mean(jnp.where(row_mask > 0, values, 0.0), row_mask)


# ---------------------------------------------------------------------------------------------
# Invalid-action penalty (docs/algorithms.md §2.1).
# ---------------------------------------------------------------------------------------------


def invalid_action_penalty(coef: float = 0.1) -> RewardShaper:
    """Subtract c·(1 − valid_i) from the last-token reward and from the GiGPO step return
    (docs/algorithms.md §2.1).

    token_rewards[i, last] −= c·(1 − valid_i); step_reward_adjust_i −= c·(1 − valid_i) (added to
    the step return without discounting). So s_i = R(traj(i)) − c·[turn i invalid].
    Metric ``valid_action_ratio``: mean of valid over real rows.
    """
    if coef < 0:
        raise ValueError(f"invalid_action_penalty coef must be >= 0, got {coef}")

    def fn(batch: TurnBatch, state: State) -> tuple[TurnBatch, State, Metrics]:
        rewards, adjust = _require(batch)
        real = batch.row_mask > 0
        penalty = jnp.where(real, coef * (1.0 - batch.action_valid), 0.0)
        rewards = rewards - penalty[:, None] * last_token_onehot(batch.response_mask)
        batch = batch._replace(token_rewards=rewards, step_reward_adjust=adjust - penalty)
        metrics = {"valid_action_ratio": _row_mean_of(batch.action_valid, batch.row_mask)}
        return batch, state, metrics

    return RewardShaper("invalid_action_penalty", fn, reductions=means("valid_action_ratio"))


# ---------------------------------------------------------------------------------------------
# DAPO overlong shaping (docs/algorithms.md §2.2).
# ---------------------------------------------------------------------------------------------


def overlong_reward(
    lengths: Array, max_response_length: int, buffer: int, penalty_factor: float
) -> Array:
    """r_over = min(−(L − (L_max − B))/B·penalty_factor, 0) (docs/algorithms.md §2.2)."""
    expected = max_response_length - buffer
    return jnp.minimum(-(lengths - expected) / buffer * penalty_factor, 0.0)


def dapo_overlong(
    max_response_length: int, buffer: int | None = None, penalty_factor: float = 0.1
) -> RewardShaper:
    """DAPO overlong shaping (docs/algorithms.md §2.2): add r_over at each row's last response
    token.

    L = the row's valid response length, B = ``buffer`` (default int(L_max/5), as the DAPO reward
    manager uses whatever the config says), r_over = min(−(L − (L_max − B))/B·factor, 0).
    Only the outcome reward changes; GiGPO step returns are left alone (the DAPO reward manager
    only runs with the ``dapo`` estimator). Metrics over real rows: ``overlong_ratio`` (fraction
    with r_over < 0) and ``overlong_reward_mean``.
    """
    if max_response_length <= 0:
        raise ValueError(f"max_response_length must be positive, got {max_response_length}")
    buffer = int(max_response_length / 5) if buffer is None else buffer
    if not 0 < buffer <= max_response_length:
        raise ValueError(
            f"overlong buffer must lie in (0, max_response_length={max_response_length}], "
            f"got {buffer}"
        )
    if penalty_factor < 0:
        raise ValueError(f"penalty_factor must be >= 0, got {penalty_factor}")

    def fn(batch: TurnBatch, state: State) -> tuple[TurnBatch, State, Metrics]:
        rewards, _ = _require(batch)
        real = batch.row_mask > 0
        r_over = overlong_reward(
            row_lengths(batch.response_mask), max_response_length, buffer, penalty_factor
        )
        r_over = jnp.where(real, r_over, 0.0)
        rewards = rewards + r_over[:, None] * last_token_onehot(batch.response_mask)
        metrics = {
            "overlong_ratio": _row_mean_of((r_over < 0).astype(r_over.dtype), batch.row_mask),
            "overlong_reward_mean": _row_mean_of(r_over, batch.row_mask),
        }
        return batch._replace(token_rewards=rewards), state, metrics

    return RewardShaper(
        "dapo_overlong", fn, reductions=means("overlong_ratio", "overlong_reward_mean")
    )


# ---------------------------------------------------------------------------------------------
# KL in the reward (docs/algorithms.md §2.3) and its coefficient controllers.
# ---------------------------------------------------------------------------------------------


class KLController(NamedTuple):
    """β schedule for the KL-in-reward shaper.

    ``init() -> β₀``; ``update(β, kl, n_rows) -> β'`` after a batch whose mean KL is ``kl`` and
    which has ``n_rows`` real rows.
    """

    name: str
    init: Callable[[], Array]
    update: Callable[[Array, Array, Array], Array]


def fixed_kl_controller(coef: float = 0.001) -> KLController:
    """Constant β = ``coef`` (verl ``kl_ctrl.type = fixed``, ``kl_coef``)."""
    if coef < 0:
        raise ValueError(f"KL coefficient must be >= 0, got {coef}")

    def init() -> Array:
        return jnp.asarray(coef, jnp.float32)

    def update(beta: Array, kl: Array, n_rows: Array) -> Array:
        del kl, n_rows
        return beta

    return KLController("fixed", init, update)


def adaptive_kl_controller(
    init_coef: float = 0.001, target_kl: float = 0.1, horizon: int = 10000
) -> KLController:
    """Adaptive β (docs/algorithms.md §2.3):
    β ← β·(1 + clip(KL/target − 1, −0.2, 0.2)·n_rows/horizon)."""
    if init_coef < 0:
        raise ValueError(f"KL init_coef must be >= 0, got {init_coef}")
    if target_kl <= 0:
        raise ValueError(f"target_kl must be positive, got {target_kl}")
    if horizon <= 0:
        raise ValueError(f"horizon must be positive, got {horizon}")

    def init() -> Array:
        return jnp.asarray(init_coef, jnp.float32)

    def update(beta: Array, kl: Array, n_rows: Array) -> Array:
        error = jnp.clip(kl / target_kl - 1.0, -0.2, 0.2)
        return beta * (1.0 + error * n_rows / horizon)

    return KLController("adaptive", init, update)


_DEFAULT_KL_CONTROLLER = fixed_kl_controller(0.001)


def kl_in_reward(
    kind: str = "k1", controller: KLController = _DEFAULT_KL_CONTROLLER
) -> RewardShaper:
    """KL penalty in the reward (docs/algorithms.md §2.3, ``algorithm.use_kl_in_reward``). Needs ref
    log-probs.

    token_rewards −= β·kl(lp_old, lp_ref)·m, with β = state["kl_reward_coef"] (the shaper's own
    entry of the objective state, so two such shapers keep separate coefficients). Then
    KL = mean over real rows of the per-row masked mean of kl (denominator max(|y_i|, 1)) and the
    controller updates β with n_rows = the number of real rows. Metrics: ``kl_reward_penalty``
    (KL) and ``kl_reward_coef`` (the β used for this batch). ``controller`` defaults to
    ``fixed_kl_controller(0.001)`` (verl's ``kl_ctrl`` defaults).
    """
    estimate = kl_estimators.estimator(kind)

    def init() -> State:
        return {KL_REWARD_COEF: jnp.asarray(controller.init(), jnp.float32)}

    def fn(batch: TurnBatch, state: State) -> tuple[TurnBatch, State, Metrics]:
        rewards, _ = _require(batch)
        if batch.ref_log_probs is None:
            raise ValueError("kl_in_reward needs TurnBatch.ref_log_probs (the reference policy)")
        if KL_REWARD_COEF not in state:
            raise ValueError(
                f"kl_in_reward needs state[{KL_REWARD_COEF!r}]: pass Objective.init_state()"
            )
        beta = state[KL_REWARD_COEF]
        mask = batch.response_mask * batch.row_mask[:, None]
        kld = jnp.where(mask > 0, estimate(batch.old_log_probs, batch.ref_log_probs), 0.0)
        rewards = rewards - beta * kld
        current_kl = _row_mean_of(row_mean(kld, mask), batch.row_mask)
        n_rows = jnp.sum(batch.row_mask)
        state = {**state, KL_REWARD_COEF: controller.update(beta, current_kl, n_rows)}
        metrics = {"kl_reward_penalty": current_kl, "kl_reward_coef": beta}
        return batch._replace(token_rewards=rewards), state, metrics

    return RewardShaper(
        "kl_in_reward",
        fn,
        init,
        needs=frozenset({Input.OLD_LOG_PROBS, Input.REF_LOG_PROBS}),
        reductions=means("kl_reward_penalty", "kl_reward_coef"),
    )
