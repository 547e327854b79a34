"""Advantage estimators over a batch of turn rows (docs/algorithms.md §3).

Each constructor returns a :class:`~arlarena_jax.objectives.compose.AdvantageEstimator` whose
``fn(batch) -> (advantages [N, T], returns [N, T])`` is a pure, jittable function of the batch that
:meth:`Objective.prepare` has filled with shaped ``token_rewards`` (and ``step_reward_adjust``).

Conventions shared by every estimator:

- The row score is s_i = Σ_t token_rewards[i, t] (after shaping; docs/algorithms.md §2). As in verl
  the sum runs over all T columns, so an empty row still carries the score placed in its last
  column.
- Every group statistic is weighted by ``row_mask``; padding rows never change a result and get
  advantage 0. Group, trajectory and anchor ids are dense segment ids in ``[0, N)``.
- Outcome estimators broadcast a row value over the row's valid tokens:
  A[i, t] = A_i·m[i, t] with m = response_mask·row_mask.
- Knobs and mode strings are resolved here, on the host, when the estimator is built.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from arlarena_jax.objectives.batch import TurnBatch
from arlarena_jax.objectives.compose import AdvantageEstimator
from arlarena_jax.objectives.declare import Input
from arlarena_jax.objectives.stats import (
    EPS_STD,
    first_token_onehot,
    group_normalize,
    last_token_onehot,
    masked_whiten,
    row_mean,
    segment_stats,
    segmented_reverse_discount,
)

Array = jax.Array

GIGPO_MODES = ("mean_norm", "mean_std_norm")


# ---------------------------------------------------------------------------------------------
# Shared helpers (pure functions of the batch).
# ---------------------------------------------------------------------------------------------


def token_mask(batch: TurnBatch) -> Array:
    """m[i, t] = response_mask[i, t]·row_mask[i]: the valid tokens of real rows."""
    return batch.response_mask * batch.row_mask[:, None]


def token_rewards(batch: TurnBatch) -> Array:
    """The shaped token rewards, 0 on padding rows; a clear error if they were never placed."""
    if batch.token_rewards is None:
        raise ValueError(
            "TurnBatch.token_rewards is None: advantage estimators run inside "
            "Objective.prepare(batch), which places the episode returns first"
        )
    return jnp.where(batch.row_mask[:, None] > 0, batch.token_rewards, 0.0)


def row_scores(batch: TurnBatch) -> Array:
    """s_i = Σ_t token_rewards[i, t] over all T columns (docs/algorithms.md §2); 0 on padding
    rows."""
    return jnp.sum(token_rewards(batch), axis=-1)


def _broadcast(row_values: Array, batch: TurnBatch) -> Array:
    """A[i, t] = a_i·m[i, t]."""
    return row_values[:, None] * token_mask(batch)


def _check_unit_interval(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value}")


def grpo_row_advantages(batch: TurnBatch, *, norm_by_std: bool) -> Array:
    """A_i = (s_i − μ_g)/(σ_g + 1e-6), or s_i − μ_g, pooled over the turn rows of uid g
    (docs/algorithms.md §3.1).

    σ is unbiased (ddof = 1); a singleton group uses μ = 0, σ = 1.
    """
    return group_normalize(
        row_scores(batch),
        batch.group_ids,
        batch.row_mask,
        divide_by_std=norm_by_std,
        singleton_mean_is_value=False,
    )


def step_returns(batch: TurnBatch, gamma: float) -> Array:
    """GiGPO step returns g_i = G_{k(i)} + step_reward_adjust_i (docs/algorithms.md §3.9 step 1).

    G_k = r_env,k + γ·G_{k+1} along each trajectory in turn order; the adjustment (the invalid
    penalty, −c·[invalid]) is added without discounting.
    """
    discounted = segmented_reverse_discount(
        batch.step_rewards, batch.traj_ids, batch.turn_ids, gamma, batch.row_mask
    )
    if batch.step_reward_adjust is None:
        return discounted
    return discounted + jnp.where(batch.row_mask > 0, batch.step_reward_adjust, 0.0)


def next_turn_value(
    values: Array, traj_ids: Array, turn_ids: Array, row_mask: Array
) -> tuple[Array, Array]:
    """For each row i, ``values`` at the real row with traj(i) and turn k(i)+1
    (docs/algorithms.md §3.10 step 4).

    Returns ``(value_at_next, has_next)``; rows without such a next-turn row (and padding rows) get
    value 0 and ``has_next`` False. Rows are sorted by (traj, turn) with padding last; the first
    position after the run of equal (traj, turn) keys is compared with the row's key, so duplicated
    rows (same traj and turn) still find their next turn. Static shapes throughout.
    """
    n = values.shape[0]
    real = row_mask > 0
    big = jnp.iinfo(jnp.int32).max
    traj = jnp.where(real, traj_ids, big)
    perm = jnp.lexsort((turn_ids, traj))
    st = traj[perm]
    sk = turn_ids[perm]
    sv = values[perm]
    pos = jnp.arange(n)
    run_start = jnp.concatenate([jnp.ones((1,), bool), (st[1:] != st[:-1]) | (sk[1:] != sk[:-1])])
    starts = jnp.where(run_start, pos, n)
    # next_start[p] = min{q > p : a run of keys starts at q}, n if none.
    next_start = jax.lax.cummin(jnp.concatenate([starts[1:], jnp.full((1,), n)]), reverse=True)
    q = jnp.minimum(next_start, n - 1)
    has_next = (next_start < n) & (st != big) & (st[q] == st) & (sk[q] == sk + 1)
    sorted_value = jnp.where(has_next, sv[q], 0.0)
    value_at_next = jnp.zeros((n,), values.dtype).at[perm].set(sorted_value)
    has = jnp.zeros((n,), bool).at[perm].set(has_next)
    return value_at_next, has


def normalized_row_entropy(old_entropy: Array, response_mask: Array, row_mask: Array) -> Array:
    """Ĥ_i = (H̄_i − min H̄)/(max H̄ − min H̄ + 1e-8), min/max over real rows
    (docs/algorithms.md §3.10 steps 1–2).

    H̄_i is the row mean of the old-policy token entropy with denominator max(|y_i|, 1). Padding
    rows get 0.
    """
    real = row_mask > 0
    hbar = jnp.where(real, row_mean(old_entropy, response_mask), 0.0)
    any_real = jnp.any(real)
    hmin = jnp.where(any_real, jnp.min(jnp.where(real, hbar, jnp.inf)), 0.0)
    hmax = jnp.where(any_real, jnp.max(jnp.where(real, hbar, -jnp.inf)), 0.0)
    return jnp.where(real, (hbar - hmin) / (hmax - hmin + 1e-8), 0.0)


# ---------------------------------------------------------------------------------------------
# Outcome (row-level) estimators.
# ---------------------------------------------------------------------------------------------


def grpo(norm_by_std: bool = True) -> AdvantageEstimator:
    r"""GRPO of the agent recipes (docs/algorithms.md §3.1): pooled turn rows per uid.

    $$A_i = \frac{s_i - \mu_g}{\sigma_g + 10^{-6}}\quad(\texttt{norm_by_std})
    \qquad\text{or}\qquad A_i = s_i - \mu_g,$$

    $\sigma_g$ with ddof = 1; a singleton group uses $\mu = 0$, $\sigma = 1$. Returns = advantages.
    """

    def fn(batch: TurnBatch) -> tuple[Array, Array]:
        adv = _broadcast(grpo_row_advantages(batch, norm_by_std=norm_by_std), batch)
        return adv, adv

    return AdvantageEstimator("grpo", fn)


def vanilla_grpo(norm_by_std: bool = True) -> AdvantageEstimator:
    """VGRPO (docs/algorithms.md §3.2): the pool of uid g holds one value per trajectory, its mean
    row score.

    A_i = (s_i − μ_g)/(σ_g + 1e-6) (or s_i − μ_g) with μ_g, σ_g (ddof = 1) over the trajectory
    means; the numerator is the row's own score. A group with a single trajectory uses μ = 0,
    σ = 1, as in §3.1. Each trajectory counts once: its first real row carries weight 1 in the
    group pool, its other rows weight 0 (integer counts, no fractional weights). Returns =
    advantages.
    """

    def fn(batch: TurnBatch) -> tuple[Array, Array]:
        scores = row_scores(batch)
        n = scores.shape[0]
        real = batch.row_mask > 0
        traj_mean = segment_stats(scores, batch.traj_ids, batch.row_mask).mean
        idx = jnp.arange(n)
        first = jax.ops.segment_min(jnp.where(real, idx, n), batch.traj_ids, num_segments=n)
        representative = (real & (first[batch.traj_ids] == idx)).astype(scores.dtype)
        pool = segment_stats(traj_mean, batch.group_ids, representative)
        singleton = pool.count < 1.5
        centred = scores - jnp.where(singleton, 0.0, pool.mean)
        if norm_by_std:
            centred = centred / (jnp.where(singleton, 1.0, pool.std) + EPS_STD)
        adv = _broadcast(jnp.where(real, centred, 0.0), batch)
        return adv, adv

    return AdvantageEstimator("vanilla_grpo", fn)


def drgrpo() -> AdvantageEstimator:
    """Dr.GRPO advantage (docs/algorithms.md §3.3): A_i = s_i − μ_g over pooled turn rows (no std
    division).

    A singleton group uses μ = 0. Pair it with the ``drgrpo`` loss (§4.2). Returns = advantages.
    """

    def fn(batch: TurnBatch) -> tuple[Array, Array]:
        adv = _broadcast(grpo_row_advantages(batch, norm_by_std=False), batch)
        return adv, adv

    return AdvantageEstimator("drgrpo", fn)


def rloo() -> AdvantageEstimator:
    r"""RLOO (docs/algorithms.md §3.4): $A_i = \frac{n}{n-1}(s_i - \mu_g)$ with
    $n = |\mathrm{pool}_g| > 1$; $A_i = s_i$ if $n = 1$.

    Pool as in §3.1 (turn rows of uid g). Returns = advantages.
    """

    def fn(batch: TurnBatch) -> tuple[Array, Array]:
        scores = row_scores(batch)
        stats = segment_stats(scores, batch.group_ids, batch.row_mask)
        n = stats.count
        scale = n / jnp.maximum(n - 1.0, 1.0)
        row = jnp.where(n > 1.5, scale * (scores - stats.mean), scores)
        adv = _broadcast(jnp.where(batch.row_mask > 0, row, 0.0), batch)
        return adv, adv

    return AdvantageEstimator("rloo", fn)


def reinforce_plus_plus_baseline() -> AdvantageEstimator:
    """REINFORCE++ with a group baseline (docs/algorithms.md §3.5).

    X[i, t] = (s_i − μ_g)·m[i, t] with the pooled mean (0 for a singleton group), then token
    whitening over all valid tokens of the batch: A = (X − μ_tok)/√(var_tok + 1e-8)·m, var_tok
    unbiased. Returns = advantages.
    """

    def fn(batch: TurnBatch) -> tuple[Array, Array]:
        centred = grpo_row_advantages(batch, norm_by_std=False)
        mask = token_mask(batch)
        adv = masked_whiten(centred[:, None] * mask, mask)
        return adv, adv

    return AdvantageEstimator("reinforce_plus_plus_baseline", fn)


def pass_at_k(norm_by_std: bool = True) -> AdvantageEstimator:
    """``grpo_passk`` (docs/algorithms.md §3.8): only the best row of each uid pool gets a nonzero
    advantage.

    A_best = (s_max − s_2nd)/(σ_g + 1e-6) (or s_max − s_2nd), σ_g the unbiased std of the pooled
    turn rows; every other row gets 0. Returns = advantages.

    Ties for the maximum are broken by the lowest row index (torch.topk leaves this unspecified);
    a tie gives s_max − s_2nd = 0, so the advantages do not depend on the choice. Deviation from
    verl: a singleton group (pool of 1) gets 0 (no comparison exists) instead of raising.
    """

    def fn(batch: TurnBatch) -> tuple[Array, Array]:
        scores = row_scores(batch)
        n = scores.shape[0]
        real = batch.row_mask > 0
        gid = batch.group_ids
        stats = segment_stats(scores, gid, batch.row_mask)
        masked = jnp.where(real, scores, -jnp.inf)
        top = jax.ops.segment_max(masked, gid, num_segments=n)[gid]
        idx = jnp.arange(n)
        best_idx = jax.ops.segment_min(
            jnp.where(real & (masked == top), idx, n), gid, num_segments=n
        )[gid]
        best = real & (idx == best_idx)
        second = jax.ops.segment_max(jnp.where(best, -jnp.inf, masked), gid, num_segments=n)[gid]
        has_pair = stats.count > 1.5
        gap = jnp.where(best & has_pair, top - second, 0.0)
        if norm_by_std:
            gap = gap / (stats.std + EPS_STD)
        adv = _broadcast(gap, batch)
        return adv, adv

    return AdvantageEstimator("grpo_passk", fn)


# ---------------------------------------------------------------------------------------------
# Token-level estimators.
# ---------------------------------------------------------------------------------------------


def _reverse_scan(step, init, xs: tuple[Array, ...]) -> Array:
    """Run ``step`` over token columns from T−1 down to 0; returns the ``[N, T]`` outputs."""
    _, out = jax.lax.scan(step, init, tuple(x.T for x in xs), reverse=True)
    return out.T


def reinforce_plus_plus(gamma: float = 1.0) -> AdvantageEstimator:
    """REINFORCE++ without baseline (docs/algorithms.md §3.6): token return-to-go, then token
    whitening.

    For t = T−1 … 0: rr ← r[t] + γ·rr; G[t] = rr; rr ← rr·m[t] (the verl reset after a masked
    position). A = masked_whiten(G, m) over all valid tokens (§3.5). Returns = G (not whitened).
    """
    _check_unit_interval("gamma", gamma)

    def fn(batch: TurnBatch) -> tuple[Array, Array]:
        rewards = token_rewards(batch)
        mask = token_mask(batch)

        def step(running: Array, column: tuple[Array, Array]) -> tuple[Array, Array]:
            reward, valid = column
            running = reward + gamma * running
            return running * valid, running

        init = jnp.zeros(rewards.shape[:1], rewards.dtype)
        returns = _reverse_scan(step, init, (rewards, mask))
        return masked_whiten(returns, mask), returns

    return AdvantageEstimator("reinforce_plus_plus", fn)


def gae(gamma: float = 1.0, lam: float = 1.0) -> AdvantageEstimator:
    """GAE, recipe version (docs/algorithms.md §3.7). Needs ``batch.values`` (a critic).

    δ_t = r_t + γ·V_{t+1} − V_t (V_T = 0), Â_t = δ_t + γλ·Â_{t+1}, over all T positions (padded
    positions are not skipped). returns = Â + V and A = masked_whiten(Â, m). V is taken as V·m,
    as verl's critic masks its values, so garbage values on padding tokens change nothing.
    """
    _check_unit_interval("gamma", gamma)
    _check_unit_interval("lam", lam)

    def fn(batch: TurnBatch) -> tuple[Array, Array]:
        if batch.values is None:
            raise ValueError("gae needs critic values: TurnBatch.values is None")
        rewards = token_rewards(batch)
        mask = token_mask(batch)
        values = jnp.where(mask > 0, batch.values, 0.0)

        def step(
            carry: tuple[Array, Array], column: tuple[Array, Array]
        ) -> tuple[tuple[Array, Array], Array]:
            next_value, next_adv = carry
            reward, value = column
            adv = reward + gamma * next_value - value + gamma * lam * next_adv
            return (value, adv), adv

        zeros = jnp.zeros(rewards.shape[:1], rewards.dtype)
        raw = _reverse_scan(step, (zeros, zeros), (rewards, values))
        return masked_whiten(raw, mask), (raw + values) * mask

    return AdvantageEstimator("gae", fn, needs=frozenset({Input.VALUES}))


def turn_token_rewards(batch: TurnBatch) -> Array:
    """Token rewards with each row's placed episode return R replaced by its own turn reward
    r_env (``step_rewards``): r[i, t] = token_rewards[i, t] + (r_env,i − R_i)·[t = last_i].
    Shaper terms (the invalid penalty, KL in the reward) stay where they were put."""
    swap = (batch.step_rewards - batch.episode_returns)[:, None]
    return (
        token_rewards(batch)
        + swap * last_token_onehot(batch.response_mask) * batch.row_mask[:, None]
    )


def _valid_token_gae(
    rewards: Array, values: Array, mask: Array, boot: Array, gamma: float, lam: float
) -> Array:
    """Â over each row's valid tokens only (masked positions are skipped, Â = 0 there), with
    V after the row's last valid token = ``boot`` [N] and Â after it = 0."""

    def step(carry, column):
        next_value, next_adv = carry
        reward, value, valid = column
        adv = reward + gamma * next_value - value + gamma * lam * next_adv
        keep = valid > 0
        carry = (jnp.where(keep, value, next_value), jnp.where(keep, adv, next_adv))
        return carry, jnp.where(keep, adv, 0.0)

    return _reverse_scan(step, (boot, jnp.zeros_like(boot)), (rewards, values, mask))


def multi_turn_gae(gamma: float = 1.0, lam: float = 1.0) -> AdvantageEstimator:
    """GAE along each trajectory across its turn rows (docs/algorithms.md §3.7b). Needs values.

    The valid tokens of a trajectory's rows, in turn order, are one sequence of steps; each row's
    turn reward r_env (not the episode return) sits on its last token (:func:`turn_token_rewards`,
    so dense per-turn rewards are seen where they were earned). δ_t = r_t + γ·V_{t+1} − V_t and
    Â_t = δ_t + γλ·Â_{t+1}, where the step after a row's last token is the first token of the
    trajectory's next turn row (V = Â = 0 after the last turn). returns = Â + V, A =
    masked_whiten(Â, m). Computed per row with the next row's first value as bootstrap, then
    Â[i, t] += (γλ)^{n_i(t)}·F_{next(i)}, n_i(t) = valid tokens of row i from t on and F_k = Â at
    row k's first token, the affine recurrence F_k = c_k + (γλ)^{L_k}·F_{k+1} solved by
    :func:`segmented_reverse_discount` with a per-row decay.
    """
    _check_unit_interval("gamma", gamma)
    _check_unit_interval("lam", lam)

    def fn(batch: TurnBatch) -> tuple[Array, Array]:
        if batch.values is None:
            raise ValueError("multi_turn_gae needs critic values: TurnBatch.values is None")
        mask = token_mask(batch)
        values = jnp.where(mask > 0, batch.values, 0.0)
        first = first_token_onehot(mask)
        first_value = jnp.sum(values * first, axis=-1)
        ids = (batch.traj_ids, batch.turn_ids, batch.row_mask)
        boot, has_next = next_turn_value(first_value, *ids)
        local = _valid_token_gae(turn_token_rewards(batch), values, mask, boot, gamma, lam)
        remaining = jnp.flip(jnp.cumsum(jnp.flip(mask, -1), -1), -1)  # valid tokens from t on
        decay = jnp.where(has_next, (gamma * lam) ** jnp.sum(mask, -1), 0.0)
        head = segmented_reverse_discount(
            jnp.sum(local * first, axis=-1), batch.traj_ids, batch.turn_ids, decay, batch.row_mask
        )
        head_next, _ = next_turn_value(head, *ids)
        raw = (local + (gamma * lam) ** remaining * head_next[:, None]) * mask
        return masked_whiten(raw, mask), (raw + values) * mask

    return AdvantageEstimator("multi_turn_gae", fn, needs=frozenset({Input.VALUES}))


# ---------------------------------------------------------------------------------------------
# GiGPO and EMPG.
# ---------------------------------------------------------------------------------------------


def gigpo(
    gamma: float = 0.95,
    step_weight: float = 1.0,
    mode: str = "mean_norm",
    similarity_threshold: float | None = None,
) -> AdvantageEstimator:
    """GiGPO (docs/algorithms.md §3.9): A_i = A_ep,i + ω·A_step,i.

    - A_ep: §3.1 on s_i, divided by the std iff ``mode == "mean_std_norm"`` (singleton: μ=0, σ=1).
    - A_step: within each anchor group h (``batch.anchor_ids``, built on the host from (uid,
      anchor observation)), (g_i − μ_h)/(σ_h + 1e-6) or g_i − μ_h, with g the step returns of
      :func:`step_returns`; a singleton step group gives 0.

    ``similarity_threshold`` is a host hint (``AdvantageEstimator.anchor_similarity``): anchors are
    then clustered by difflib ratio ≥ threshold instead of exact equality. Returns = advantages.
    """
    if mode not in GIGPO_MODES:
        raise ValueError(f"gigpo mode must be one of {GIGPO_MODES}, got {mode!r}")
    if similarity_threshold is not None and not 0.0 < similarity_threshold <= 1.0:
        raise ValueError(
            f"gigpo similarity_threshold must lie in (0, 1] or be None, got {similarity_threshold}"
        )
    _check_unit_interval("gamma", gamma)
    divide_by_std = mode == "mean_std_norm"

    def fn(batch: TurnBatch) -> tuple[Array, Array]:
        episode = grpo_row_advantages(batch, norm_by_std=divide_by_std)
        step = group_normalize(
            step_returns(batch, gamma),
            batch.anchor_ids,
            batch.row_mask,
            divide_by_std=divide_by_std,
            singleton_mean_is_value=True,
        )
        adv = _broadcast(episode + step_weight * step, batch)
        return adv, adv

    return AdvantageEstimator("gigpo", fn, anchor_similarity=similarity_threshold)


def empg(
    k: float = 1.0, k_f: float = 1.0, zeta: float = 0.05, norm_by_std: bool = True
) -> AdvantageEstimator:
    """EMPG on top of GRPO (docs/algorithms.md §3.10). Needs ``batch.old_entropy``; turns come from
    ``turn_ids``.

    With Ĥ the batch min-max normalised row-mean entropy (:func:`normalized_row_entropy`),
    g_i = e^{−kĤ_i}/(mean_j e^{−kĤ_j} + 1e-8) and f_i = e^{−k_f·Ĥ_i}:

        A'[i, t] = g_i·A_GRPO[i, t] + ζ·f_{next(i)}      (second term only if turn k(i)+1 exists)
        A' ← (A' − mean_i A'[i, 0])·m

    where next(i) is the row of traj(i) at turn k(i)+1 (:func:`next_turn_value`) and A_GRPO[i, t]
    is §3.1's advantage already multiplied by m. Means, min and max run over real rows only.
    Returns = advantages.
    """

    def fn(batch: TurnBatch) -> tuple[Array, Array]:
        if batch.old_entropy is None:
            raise ValueError(
                "empg needs the old-policy token entropy: TurnBatch.old_entropy is None"
            )
        mask = token_mask(batch)
        row_mask = batch.row_mask
        real = row_mask > 0
        n_real = jnp.maximum(jnp.sum(row_mask), 1.0)
        h = normalized_row_entropy(batch.old_entropy, batch.response_mask, row_mask)
        e = jnp.where(real, jnp.exp(-k * h), 0.0)
        g = e / (jnp.sum(e) / n_real + 1e-8)
        f = jnp.exp(-k_f * h)
        f_next, _ = next_turn_value(f, batch.traj_ids, batch.turn_ids, row_mask)
        base = _broadcast(grpo_row_advantages(batch, norm_by_std=norm_by_std), batch)
        shaped = g[:, None] * base + zeta * f_next[:, None]
        first_column_mean = jnp.sum(jnp.where(real, shaped[:, 0], 0.0)) / n_real
        adv = (shaped - first_column_mean) * mask
        return adv, adv

    return AdvantageEstimator("empg", fn, needs=frozenset({Input.OLD_ENTROPY}))
