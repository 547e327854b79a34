"""Importance ratios and clipping: the policy-loss components of docs/algorithms.md §4.

Every loss is minimised and returns an ``[N, T]`` loss matrix ``L`` (aggregated afterwards by the
objective's :mod:`~arlarena_jax.objectives.aggregate` mode) and the metrics of
docs/algorithms.md §4: ``pg_clipfrac``, ``pg_clipfrac_lower`` and ``ppo_kl`` (masked means over the
policy-loss mask).
Notation: δ = lp − lp_old, δ_c = clip(δ, −20, 20), r = exp(δ_c), A the advantage matrix, m the mask.

Sequence masking (:func:`sequence_mask`) and the rollout corrections for the sampler/trainer
mismatch (token TIS :func:`truncated_is`, Seq-TIS :func:`sequence_truncated_is`, the rejections
:func:`sequence_rejection` and :func:`geometric_rejection`, docs/algorithms.md §4.9-4.12) are
separate components that combine with any loss here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from arlarena_jax.objectives.batch import TurnBatch
from arlarena_jax.objectives.compose import LossWeight, MaskTransform, PolicyLoss
from arlarena_jax.objectives.declare import Input, means
from arlarena_jax.objectives.stats import masked_mean, row_lengths, row_mean

Array = jax.Array
sg = jax.lax.stop_gradient

RATIO_LOG_CLAMP = 20.0  # |δ| clamp before exp for token-level ratios (docs/algorithms.md §4)
GSPO_LOG_CLAMP = 10.0  # upper clamp of the GSPO log ratio (docs/algorithms.md §4.3)
OLD_LOG_PROBS = frozenset({Input.OLD_LOG_PROBS})  # what every ratio reads besides lp
ROLLOUT_INPUTS = frozenset({Input.OLD_LOG_PROBS, Input.ROLLOUT_LOG_PROBS})  # rollout correction
ROLLOUT_LOG_CLAMP = 20.0  # |log ρ| clamp before exp of a sequence ratio (verl's, SkyRL's bound)
# The metrics of every policy loss (docs/algorithms.md §4).
PG_METRICS = means("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl")


def _policy_loss(name: str, fn) -> PolicyLoss:
    """A ratio-based policy loss: reads lp_old, emits the docs/algorithms.md §4 metrics (means)."""
    return PolicyLoss(name, fn, needs=OLD_LOG_PROBS, reductions=PG_METRICS)


def _clip_bounds(
    clip_ratio: float, clip_ratio_low: float | None, clip_ratio_high: float | None
) -> tuple[float, float]:
    low = clip_ratio if clip_ratio_low is None else clip_ratio_low
    high = clip_ratio if clip_ratio_high is None else clip_ratio_high
    if low < 0 or high < 0:
        raise ValueError(f"clip ratios must be >= 0, got clip_ratio_low={low}, high={high}")
    return low, high


def _token_ratio(log_probs: Array, old_log_probs: Array) -> tuple[Array, Array]:
    """(δ_c, r) with δ_c = clip(lp − lp_old, −20, 20) and r = exp(δ_c)."""
    delta = jnp.clip(log_probs - old_log_probs, -RATIO_LOG_CLAMP, RATIO_LOG_CLAMP)
    return delta, jnp.exp(delta)


def _ppo_dual_clip(
    advantages: Array, ratio: Array, low: float, high: float, dual_clip: float
) -> tuple[Array, Array, Array]:
    """docs/algorithms.md §4.1: L = max(−A·r, −A·clip(r, 1−εl, 1+εh)), then min(·, −A·c) where
    A < 0.

    Returns (L, clipped-mask [L2 > L1], dual-clipped-mask [Lc > L3 ∧ A < 0]).
    """
    l1 = -advantages * ratio
    l2 = -advantages * jnp.clip(ratio, 1.0 - low, 1.0 + high)
    lc = jnp.maximum(l1, l2)
    l3 = -advantages * dual_clip
    negative = advantages < 0
    loss = jnp.where(negative, jnp.minimum(l3, lc), lc)
    return loss, l2 > l1, (lc > l3) & negative


def vanilla(
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float = 3.0,
) -> PolicyLoss:
    r"""PPO token clip with dual clip (docs/algorithms.md §4.1).

    $$L = \max\big(-A\,r,\ -A\,\mathrm{clip}(r, 1-\varepsilon_l, 1+\varepsilon_h)\big),
    \qquad L \leftarrow \min(L, -A\,c) \text{ where } A < 0,$$

    with $r = e^{\delta_c}$. $\partial L/\partial lp = -A\,r$ on active tokens
    ($A > 0 \wedge r \le 1+\varepsilon_h$, or $A < 0 \wedge 1-\varepsilon_l \le r \le c$), else 0.
    Metrics: pg_clipfrac = mean[L2 > L1], pg_clipfrac_lower = mean[Lc > L3 ∧ A < 0],
    ppo_kl = mean(−δ_c).
    """
    low, high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 (dual-clip bound), got {clip_ratio_c}")
    return _policy_loss("vanilla", _vanilla_fn(low, high, clip_ratio_c, scale=1.0))


def _vanilla_fn(low: float, high: float, dual_clip: float, scale: float):
    def fn(log_probs: Array, batch: TurnBatch, mask: Array):
        delta, ratio = _token_ratio(log_probs, batch.old_log_probs)
        loss, clipped, dual = _ppo_dual_clip(batch.advantages, ratio, low, high, dual_clip)
        metrics = {
            "pg_clipfrac": masked_mean(clipped, mask),
            "pg_clipfrac_lower": masked_mean(dual, mask),
            "ppo_kl": masked_mean(-delta, mask),
        }
        return loss * scale, metrics

    return fn


def dr_grpo(
    max_response_length: int = 500,
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float = 3.0,
) -> PolicyLoss:
    """Dr.GRPO loss (docs/algorithms.md §4.2): the vanilla dual-clip loss divided by L_max.

    Composed with :func:`~arlarena_jax.objectives.aggregate.seq_mean_token_sum` it gives
    pg_loss = (1/N) Σ_i Σ_t m·L / L_max, with L_max = ``max_response_length``.
    """
    low, high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    if max_response_length <= 0:
        raise ValueError(f"max_response_length must be > 0, got {max_response_length}")
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 (dual-clip bound), got {clip_ratio_c}")
    return _policy_loss(
        "dr_grpo", _vanilla_fn(low, high, clip_ratio_c, scale=1.0 / max_response_length)
    )


def _gspo_metrics(clipped: Array, delta: Array, mask: Array) -> dict[str, Array]:
    return {
        "pg_clipfrac": masked_mean(clipped, mask),
        "pg_clipfrac_lower": jnp.zeros((), jnp.float32),
        "ppo_kl": masked_mean(-delta, mask),
    }


def _gspo_sequence_fn(clip_low: float, clip_high: float):
    """Row-level GSPO: one ratio, one clip and one loss per row, broadcast over its tokens.

    Differentiating s_i = exp(min(δ̄_i, 10)) directly gives ∂s_i/∂lp[i,t] = s_i·m/|y_i|, so
    under any aggregation a broadcast row loss has exactly the per-token gradient of the
    stop-gradient form (the row's |y_i| tokens each carry 1/|y_i| of it). One exp per row.
    """

    def fn(log_probs: Array, batch: TurnBatch, mask: Array):
        delta = log_probs - batch.old_log_probs  # unclamped (docs/algorithms.md §4.3)
        s = jnp.exp(jnp.minimum(row_mean(delta, mask), GSPO_LOG_CLAMP))
        adv = row_mean(batch.advantages, mask)
        l1 = -adv * s
        l2 = -adv * jnp.clip(s, 1.0 - clip_low, 1.0 + clip_high)
        loss = jnp.broadcast_to(jnp.maximum(l1, l2)[:, None], log_probs.shape)
        clipped = jnp.broadcast_to((l2 > l1)[:, None], log_probs.shape)
        return loss, _gspo_metrics(clipped, delta, mask)

    return fn


def _gspo_token_fn(clip_low: float, clip_high: float):
    def fn(log_probs: Array, batch: TurnBatch, mask: Array):
        delta = log_probs - batch.old_log_probs  # unclamped (docs/algorithms.md §4.3)
        log_s = log_probs - sg(log_probs) + sg(row_mean(delta, mask))[:, None]
        s = jnp.exp(jnp.minimum(log_s, GSPO_LOG_CLAMP))
        adv = batch.advantages
        l1 = -adv * s
        l2 = -adv * jnp.clip(s, 1.0 - clip_low, 1.0 + clip_high)
        return jnp.maximum(l1, l2), _gspo_metrics(l2 > l1, delta, mask)

    return fn


def gspo(clip_low: float = 3e-4, clip_high: float = 4e-4) -> PolicyLoss:
    r"""GSPO with a per-turn geometric-mean ratio and the sequence's advantage
    (docs/algorithms.md §4.3).

    $$s_i = \exp\big(\min(\bar\delta_i, 10)\big),\qquad
    \bar\delta_i = \frac{\sum_t m_{i,t}\,\delta_{i,t}}{\max(|y_i|, 1)}\quad\text{(no ±20 clamp)},$$

    $$L_i = \max\big(-\bar A_i\,s_i,\
    -\bar A_i\,\mathrm{clip}(s_i, 1-\varepsilon_l, 1+\varepsilon_h)\big)$$

    (no dual clip, $\bar A_i$ the row-mean advantage) sits on every token of row i. Its gradient
    equals verl's stop-gradient form log s[i,t] = lp − sg(lp) + sg(δ̄_i) under every
    aggregation, at one exp per row. With seq-mean-token-mean an unclipped row contributes
    −Ā_i·s_i·(1/|y_i|)·Σ_t ∇lp[i,t] / |V|: GSPO's sequence gradient. verl's ``gspo`` loss
    equals this whenever the advantage is constant along the row (every outcome estimator).
    Defaults are the GSPO paper's; the ARLArena presets pass their own (docs/algorithms.md §8).
    """
    return _policy_loss("gspo", _gspo_sequence_fn(clip_low, clip_high))


def gspo_token(clip_low: float = 3e-4, clip_high: float = 4e-4) -> PolicyLoss:
    """GSPO-token (docs/algorithms.md §4.4): as :func:`gspo` but with the token-level advantage
    A[i,t].

    s[i,t] = sg(s_i)·π(y_t)/sg(π(y_t)); L = max(−A·s, −A·clip(s, 1−εl, 1+εh)). This is verl's
    ``gspo`` formula verbatim; it differs from :func:`gspo` only for token-level advantages.
    """
    return _policy_loss("gspo_token", _gspo_token_fn(clip_low, clip_high))


def sapo(
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
) -> PolicyLoss:
    """SAPO soft adaptive gate (docs/algorithms.md §4.5).

    τ_i = τ+ if Ā_i > 0 else τ−; gate = (4/τ_i)·σ(τ_i·(r − 1)); L = −gate·A.
    ∂L/∂lp = −A·4σ(1−σ)·r, which is −A at r = 1. The clip ratios feed only the diagnostic
    pg_clipfrac = mean[(r > 1+εh ∧ A > 0) ∨ (r < 1−εl ∧ A < 0)].
    """
    low, high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"SAPO temperatures must be > 0, got tau_pos={tau_pos}, tau_neg={tau_neg}")

    def fn(log_probs: Array, batch: TurnBatch, mask: Array):
        delta, ratio = _token_ratio(log_probs, batch.old_log_probs)
        adv = batch.advantages
        tau = jnp.where(row_mean(adv, mask) > 0, tau_pos, tau_neg)[:, None]
        gate = (4.0 / tau) * jax.nn.sigmoid(tau * (ratio - 1.0))
        outside = ((ratio > 1.0 + high) & (adv > 0)) | ((ratio < 1.0 - low) & (adv < 0))
        metrics = {
            "pg_clipfrac": masked_mean(outside, mask),
            "pg_clipfrac_lower": jnp.zeros((), jnp.float32),
            "ppo_kl": masked_mean(-delta, mask),
        }
        return -gate * adv, metrics

    return _policy_loss("sapo", fn)


def cispo(
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
) -> PolicyLoss:
    """CISPO: clipped stop-gradient IS weight times log-prob (docs/algorithms.md §4.6).

    r̂ = clip(r, 1−εl, 1+εh); L = −sg(r̂)·A·lp, so ∂L/∂lp = −r̂·A (never zeroed, only capped).
    The value contains lp itself. pg_clipfrac = mean[r ≠ r̂] (A = 0 tokens count too).
    ARLArena's scripts use clip_ratio_low = 1.0 (no lower bound).
    """
    low, high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)

    def fn(log_probs: Array, batch: TurnBatch, mask: Array):
        delta, ratio = _token_ratio(log_probs, batch.old_log_probs)
        clipped = jnp.clip(ratio, 1.0 - low, 1.0 + high)
        metrics = {
            "pg_clipfrac": masked_mean(ratio != clipped, mask),
            "pg_clipfrac_lower": jnp.zeros((), jnp.float32),
            "ppo_kl": masked_mean(-delta, mask),
        }
        return -sg(clipped) * batch.advantages * log_probs, metrics

    return _policy_loss("cispo", fn)


def gmpo(
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
) -> PolicyLoss:
    """GMPO, geometric-mean policy optimisation (docs/algorithms.md §4.7, ``geo_mean``).

    δ̃ = sgn(A)·min(sgn(A)·δ, sgn(A)·clip(δ, −εl, εh)) (clip in log space, δ unclamped),
    ρ_i = exp(Σ_t m·δ̃ / (|y_i| + 1e-8)), Ā_i = Σ_t m·A / (|y_i| + 1e-8), row loss −Ā_i·ρ_i.
    The row loss is placed on every token of the row, so seq-mean-token-mean returns the mean of
    row losses over non-empty rows (verl averages over all rows; empty rows have Ā = 0 there).
    Metrics: pg_clipfrac = mean[δ ≠ clip(δ) ∧ A > 0], pg_clipfrac_lower likewise with A < 0.
    """
    low, high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)

    def fn(log_probs: Array, batch: TurnBatch, mask: Array):
        adv = batch.advantages
        delta = log_probs - batch.old_log_probs
        clipped = jnp.clip(delta, -low, high)
        sign = jnp.sign(adv)
        delta_tilde = sign * jnp.minimum(sign * delta, sign * clipped)
        length = row_lengths(mask) + 1e-8
        rho = jnp.exp(jnp.sum(delta_tilde * mask, axis=-1) / length)
        mean_adv = jnp.sum(adv * mask, axis=-1) / length
        is_clipped = delta != clipped
        metrics = {
            "pg_clipfrac": masked_mean(is_clipped & (adv > 0), mask),
            "pg_clipfrac_lower": masked_mean(is_clipped & (adv < 0), mask),
            "ppo_kl": masked_mean(-delta, mask),
        }
        row_loss = -mean_adv * rho
        return jnp.broadcast_to(row_loss[:, None], log_probs.shape), metrics

    return _policy_loss("gmpo", fn)


def sequence_mask(delta: float = 0.223) -> MaskTransform:
    """Off-policy sequence masking, the ``_SM`` variants (docs/algorithms.md §4.8).

    Ā_i = row-mean advantage, κ_i = Σ_t m·(lp_old − lp) / max(|y_i|, 1) on unclamped δ. Row i is
    dropped from the policy loss iff Ā_i < 0 and κ_i > δ_SM. Recomputed for every micro-batch
    from the current lp; KL and entropy terms keep the unmasked response mask.
    Metric: num_masked_seqs = number of dropped rows. ARLArena's agentic scripts use δ = 3e-3.
    """
    if delta < 0:
        raise ValueError(f"seq_mask_delta must be >= 0, got {delta}")

    def fn(log_probs: Array, batch: TurnBatch, mask: Array):
        mean_adv = row_mean(batch.advantages, mask)
        kappa = row_mean(sg(batch.old_log_probs - log_probs), mask)
        rejected = (mean_adv < 0) & (kappa > delta)
        keep = jnp.where(rejected, 0.0, 1.0).astype(mask.dtype)
        num_masked = jnp.sum(rejected * batch.row_mask)
        return mask * keep[:, None], {"num_masked_seqs": num_masked}

    return MaskTransform(
        "sequence_mask", fn, needs=OLD_LOG_PROBS, reductions=means("num_masked_seqs")
    )


def _rollout_log_ratio(batch: TurnBatch, component: str) -> Array:
    """Δ = lp_old − lp_rollout on the rows' response tokens, exactly 0 elsewhere (``jnp.where``, so
    a padding value, even inf or NaN, never reaches a row's sum)."""
    if batch.rollout_log_probs is None:
        raise ValueError(f"{component} needs TurnBatch.rollout_log_probs (sampler log-probs)")
    valid = batch.response_mask > 0
    return jnp.where(valid, batch.old_log_probs - batch.rollout_log_probs, 0.0)


def _real_row_mean(x: Array, row_mask: Array) -> Array:
    """The mean of a per-row value (a flag: the fraction of rows) over the real rows."""
    return jnp.sum(x * row_mask) / (jnp.sum(row_mask) + 1e-8)


def truncated_is(cap: float) -> LossWeight:
    """Token-level truncated importance sampling, TIS (docs/algorithms.md §4.9):
    L ← L·min(exp(lp_old − lp_rollout), cap).

    Corrects for the sampler/trainer mismatch; needs ``rollout_log_probs`` in the batch.
    Metrics: tis_weight_mean (masked mean weight), tis_capped_frac (tokens at the cap).
    """
    if cap <= 0:
        raise ValueError(f"tis_imp_ratio_cap must be > 0 to enable truncated IS, got {cap}")

    def fn(log_probs: Array, batch: TurnBatch) -> tuple[Array, dict[str, Array]]:
        ratio = jnp.exp(_rollout_log_ratio(batch, "truncated_is"))
        weight = jnp.minimum(ratio, cap)
        mask = batch.response_mask
        metrics = {
            "tis_weight_mean": masked_mean(weight, mask),
            "tis_capped_frac": masked_mean(ratio > cap, mask),
        }
        return weight, metrics

    return LossWeight(
        "truncated_is",
        fn,
        needs=ROLLOUT_INPUTS,
        reductions=means("tis_weight_mean", "tis_capped_frac"),
    )


def sequence_truncated_is(cap: float = 2.0) -> LossWeight:
    """Sequence-level truncated IS, Seq-TIS (docs/algorithms.md §4.10).

    log ρ_i = Σ_t m·(lp_old − lp_rollout) (the log of the product of the row's token ratios),
    w_i = min(exp(clip(log ρ_i, −20, 20)), cap), one constant weight on every token of row i.
    Metrics over real rows: seq_tis_weight_mean and seq_tis_capped_frac (ρ_i > cap).
    """
    if not cap > 0:
        raise ValueError(f"rollout_is_threshold must be > 0 (the Seq-TIS cap), got {cap}")
    log_cap = math.log(cap)

    def fn(log_probs: Array, batch: TurnBatch) -> tuple[Array, dict[str, Array]]:
        log_rho = jnp.sum(_rollout_log_ratio(batch, "sequence_truncated_is"), axis=-1)
        safe = jnp.clip(log_rho, -ROLLOUT_LOG_CLAMP, ROLLOUT_LOG_CLAMP)
        weight = jnp.minimum(jnp.exp(safe), cap)
        metrics = {
            "seq_tis_weight_mean": _real_row_mean(weight, batch.row_mask),
            "seq_tis_capped_frac": _real_row_mean(log_rho > log_cap, batch.row_mask),
        }
        return jnp.broadcast_to(weight[:, None], log_probs.shape), metrics

    return LossWeight(
        "sequence_truncated_is",
        fn,
        needs=ROLLOUT_INPUTS,
        reductions=means("seq_tis_weight_mean", "seq_tis_capped_frac"),
    )


def _rs_bounds(name: str, upper: float, lower: float | None) -> tuple[float, float]:
    """(log lower, log upper) of a rejection window; lower defaults to 1/upper (verl)."""
    lower = 1.0 / upper if lower is None else lower
    if not upper > 1.0:
        raise ValueError(f"{name}: rollout_rs_threshold must be > 1, got {upper}")
    if not 0.0 < lower < 1.0:
        raise ValueError(f"{name}: rollout_rs_threshold_lower must be in (0, 1), got {lower}")
    return math.log(lower), math.log(upper)


def _row_rejection(
    name: str,
    key: str,
    statistic: Callable[[Array, Array], Array],
    upper: float,
    lower: float | None,
) -> MaskTransform:
    """A MaskTransform dropping rows whose log statistic lies outside [log lower, log upper]."""
    log_low, log_high = _rs_bounds(name, upper, lower)

    def fn(log_probs: Array, batch: TurnBatch, mask: Array):
        log_ratio = statistic(_rollout_log_ratio(batch, name), batch.response_mask)
        high, low = log_ratio > log_high, log_ratio < log_low
        keep = jnp.where(high | low, 0.0, 1.0).astype(mask.dtype)
        metrics = {
            f"{key}_rejected_frac": _real_row_mean(high | low, batch.row_mask),
            f"{key}_high_frac": _real_row_mean(high, batch.row_mask),
        }
        return mask * keep[:, None], metrics

    reductions = means(f"{key}_rejected_frac", f"{key}_high_frac")
    return MaskTransform(name, fn, needs=ROLLOUT_INPUTS, reductions=reductions)


def _sequence_log_ratio(delta: Array, mask: Array) -> Array:
    return jnp.sum(delta, axis=-1)


def sequence_rejection(upper: float = 2.0, lower: float | None = None) -> MaskTransform:
    """Sequence-level rejection, the RS half of Seq-MIS (docs/algorithms.md §4.11).

    log ρ_i = Σ_t m·(lp_old − lp_rollout); row i leaves the policy-loss mask iff
    ρ_i > upper or ρ_i < lower (lower = 1/upper by default), tested on log ρ_i (no overflow).
    Seq-MIS is this plus :func:`sequence_truncated_is`. Metrics over real rows:
    seq_rs_rejected_frac and seq_rs_high_frac (rejected for ρ_i > upper).
    """
    return _row_rejection("sequence_rejection", "seq_rs", _sequence_log_ratio, upper, lower)


def geometric_rejection(upper: float = 1.001, lower: float | None = None) -> MaskTransform:
    """Geometric-mean rejection, Geo-RS (docs/algorithms.md §4.12).

    log ρ̄_i = Σ_t m·(lp_old − lp_rollout) / max(|y_i|, 1), the log of the per-token geometric
    mean ratio; row i leaves the policy-loss mask iff ρ̄_i > upper or ρ̄_i < lower
    (lower = 1/upper by default). Metrics: geo_rs_rejected_frac, geo_rs_high_frac.
    """
    return _row_rejection("geometric_rejection", "geo_rs", row_mean, upper, lower)
