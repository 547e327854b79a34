"""The paper's methods as compositions of objective components, with every hyper-parameter a field.

A method is a :class:`Preset`: a builder ``build(settings) -> Objective`` made only of public
components, the :class:`MethodSettings` fields it reads (``knobs``) and the values it changes from
the shared defaults (``defaults``). :func:`settings` resolves ``defaults`` and a caller's
overrides into one typed :class:`MethodSettings`; :func:`build` composes the objective. The
trainer's ``algorithm`` config section is these fields (``algorithm.clip_high=5e-3``), so a sweep
can vary any of them for any method.

Shared defaults are the ALFWorld agentic scripts' (docs/algorithms.md, "Presets"): invalid-action
penalty 0.1, k3 KL loss with coefficient 0.01, entropy bonus 0.001, token-mean aggregation, PPO
clip 0.2 with dual clip 3, γ = 0.95. Methods from the authors' internal WebShop scripts
(Dr.GRPO, vanilla GRPO, REINFORCE++, PPO) run without the KL loss (``use_kl_loss: false``), as
those scripts do.
Where a release script for another environment differs (WebShop's SAMPO uses GiGPO ``mean_norm``
and a cold start of 5), the environment's registration carries the overrides, not this module.

Every preset reads the four dimensions' generic knobs (aggregation, sequence masking, the
regularizers and dynamic sampling) and the rollout corrections (TIS, Seq-TIS, Seq-MIS, Geo-RS),
so any method can be crossed with any of them.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

from arlarena_jax.objectives import advantage, ratio, regularize, rewards
from arlarena_jax.objectives import aggregate as agg
from arlarena_jax.objectives.compose import GroupFilter, Objective, chain

AggMode = Literal[
    "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
]
KLType = Literal["k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl"]
GiGPOMode = Literal["mean_norm", "mean_std_norm"]
RolloutIS = Literal["token", "sequence", "disabled"]  # "disabled": none, also async
RolloutRS = Literal["sequence", "geometric"]
# rollout_rs_threshold when null: verl's rollout_corr presets (Seq-MIS 2.0, Geo-RS 1.001).
ROLLOUT_RS_THRESHOLD = {"sequence": 2.0, "geometric": 1.001}


@dataclasses.dataclass(frozen=True)
class MethodSettings:
    """Every hyper-parameter a preset reads; defaults are the shared agentic-script values."""

    invalid_penalty: float = 0.1  # subtracted from an invalid action's turn reward
    use_kl_loss: bool = True  # the KL-to-reference loss term (false: no reference model)
    kl_type: KLType = "k3"  # KL estimator of the KL loss
    kl_coef: float = 0.01  # KL loss coefficient
    entropy_coef: float = 1e-3  # entropy bonus coefficient
    loss_agg_mode: AggMode = "token-mean"  # policy-loss aggregation (verl loss_agg_mode)
    regularizer_agg_mode: AggMode | None = None  # KL/entropy aggregation; null: loss_agg_mode
    clip_low: float = 0.2  # ε_low of the ratio clip (GSPO: of the sequence ratio)
    clip_high: float = 0.2  # ε_high
    clip_ratio_c: float = 3.0  # dual-clip bound c for negative advantages (> 1)
    use_seq_mask: bool = False  # off-policy sequence masking
    seq_mask_delta: float = 3e-3  # its threshold δ (every agentic _SM script's)
    sapo_tau_pos: float = 1.0  # SAPO gate temperature for positive advantages
    sapo_tau_neg: float = 1.05  # and for negative ones
    gamma: float = 0.95  # discount of step returns (GiGPO, REINFORCE++, GAE)
    gae_lambda: float = 1.0  # GAE λ
    gae_across_turns: bool = False  # GAE along the trajectory with per-turn rewards (§3.7b)
    step_weight: float = 1.0  # GiGPO ω: A = A_episode + ω·A_step
    gigpo_mode: GiGPOMode = "mean_std_norm"  # divide GiGPO advantages by the group std or not
    drgrpo_max_length: int = 500  # Dr.GRPO's constant normaliser L_max
    overlong_max_length: int = 512  # DAPO overlong shaping's L_max (data.max_response_length)
    empg_k: float = 1.0  # EMPG self-calibrating scale k
    empg_k_f: float = 1.0  # EMPG future-clarity scale k_f
    empg_zeta: float = 0.05  # EMPG future-clarity weight ζ
    dynamic_sampling: bool = False  # drop groups whose rewards are all equal, sample again
    max_num_gen_batches: int = 3  # rollout tries per step
    cold_start_steps: int = 0  # dynamic sampling stays off for steps ≤ this
    use_kl_in_reward: bool = False  # subtract β·KL(π_old‖π_ref) from the token rewards (§2.3)
    kl_in_reward_type: KLType = "k1"  # its KL estimator (verl algorithm.kl_penalty)
    kl_in_reward_coef: float = 1e-3  # β, or its start with a target (verl kl_ctrl.kl_coef)
    kl_in_reward_target: float | None = None  # adaptive β towards this KL; null: β fixed
    kl_in_reward_horizon: int = 10000  # the adaptive controller's horizon (rows)
    rollout_is: RolloutIS | None = None  # TIS (token), Seq-TIS, disabled; null: TIS if async
    rollout_is_threshold: float = 2.0  # its cap C: w = min(ratio, C)
    rollout_rs: RolloutRS | None = None  # row rejection: Seq-MIS (sequence) or Geo-RS (geometric)
    rollout_rs_threshold: float | None = None  # upper bound U (null: 2.0 sequence, 1.001 geo)
    rollout_rs_threshold_lower: float | None = None  # lower bound (null: 1/U)


# (predicate, requirement) per numeric field; None passes (regularizer_agg_mode's "follow").
_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "invalid_penalty": (lambda v: v >= 0, ">= 0"),
    "kl_coef": (lambda v: v >= 0, ">= 0"),
    "entropy_coef": (lambda v: v >= 0, ">= 0"),
    "clip_low": (lambda v: v >= 0, ">= 0"),
    "clip_high": (lambda v: v >= 0, ">= 0"),
    "clip_ratio_c": (lambda v: v > 1, "> 1"),
    "seq_mask_delta": (lambda v: v > 0, "> 0"),
    "sapo_tau_pos": (lambda v: v > 0, "> 0"),
    "sapo_tau_neg": (lambda v: v > 0, "> 0"),
    "gamma": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "gae_lambda": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "step_weight": (lambda v: v >= 0, ">= 0"),
    "drgrpo_max_length": (lambda v: v >= 1, ">= 1"),
    "overlong_max_length": (lambda v: v >= 5, ">= 5 (the buffer is a fifth of it)"),
    "empg_k": (lambda v: v >= 0, ">= 0"),
    "empg_k_f": (lambda v: v >= 0, ">= 0"),
    "empg_zeta": (lambda v: v >= 0, ">= 0"),
    "max_num_gen_batches": (lambda v: v >= 1, ">= 1"),
    "cold_start_steps": (lambda v: v >= 0, ">= 0"),
    "kl_in_reward_coef": (lambda v: v >= 0, ">= 0"),
    "kl_in_reward_target": (lambda v: v > 0, "> 0 (or null: a fixed coefficient)"),
    "kl_in_reward_horizon": (lambda v: v >= 1, ">= 1"),
    "rollout_is": (lambda v: v in typing.get_args(RolloutIS), "token, sequence, disabled or null"),
    "rollout_is_threshold": (lambda v: v > 0, "> 0"),
    "rollout_rs": (lambda v: v in typing.get_args(RolloutRS), "sequence, geometric or null"),
    "rollout_rs_threshold": (lambda v: v > 1, "> 1 (or null: 2.0 sequence, 1.001 geometric)"),
    "rollout_rs_threshold_lower": (lambda v: 0 < v < 1, "in (0, 1) (or null: 1/upper)"),
}


def invalid_settings(s: MethodSettings) -> Iterator[tuple[str, str]]:
    """``(field, message)`` for every value outside its range (NaN fails every rule)."""
    for name, (ok, requirement) in _RULES.items():
        value = getattr(s, name)
        if value is not None and not ok(value):
            yield name, f"must be {requirement}, got {value!r}"


# ---------------------------------------------------------------------------------------------
# Building blocks: the generic knobs every preset reads.
# ---------------------------------------------------------------------------------------------

GENERIC = (
    "invalid_penalty",
    "use_kl_loss",
    "kl_type",
    "kl_coef",
    "entropy_coef",
    "loss_agg_mode",
    "regularizer_agg_mode",
    "use_seq_mask",
    "seq_mask_delta",
    "dynamic_sampling",
    "max_num_gen_batches",
    "cold_start_steps",
    "use_kl_in_reward",
    "kl_in_reward_type",
    "kl_in_reward_coef",
    "kl_in_reward_target",
    "kl_in_reward_horizon",
    "rollout_is",
    "rollout_is_threshold",
    "rollout_rs",
    "rollout_rs_threshold",
    "rollout_rs_threshold_lower",
)
CLIP = ("clip_low", "clip_high")
DUAL_CLIP = (*CLIP, "clip_ratio_c")


def _generic(s: MethodSettings) -> tuple:
    """Aggregation, sequence mask, invalid penalty, KL and entropy terms and the group filter."""
    regularizer_agg = (
        None if s.regularizer_agg_mode is None else agg.by_name(s.regularizer_agg_mode)
    )
    parts: list = [agg.by_name(s.loss_agg_mode), rewards.invalid_action_penalty(s.invalid_penalty)]
    if s.use_kl_in_reward:
        parts.append(rewards.kl_in_reward(s.kl_in_reward_type, _kl_controller(s)))
    if s.use_seq_mask:
        parts.append(ratio.sequence_mask(s.seq_mask_delta))
    parts.extend(_rollout_correction(s))
    if s.use_kl_loss:
        parts.append(regularize.kl(s.kl_type, s.kl_coef, aggregation=regularizer_agg))
    parts.append(regularize.entropy(s.entropy_coef, aggregation=regularizer_agg))
    if s.dynamic_sampling:
        parts.append(GroupFilter(s.max_num_gen_batches, s.cold_start_steps))
    return tuple(parts)


def _rollout_correction(s: MethodSettings) -> list:
    """The sampler/trainer correction (docs/algorithms.md §4.9-4.12): an IS weight (TIS or
    Seq-TIS) and a row rejection (Seq-MIS's or Geo-RS); both read ``rollout_log_probs``."""
    parts: list = []
    if s.rollout_is == "token":
        parts.append(ratio.truncated_is(s.rollout_is_threshold))
    elif s.rollout_is == "sequence":
        parts.append(ratio.sequence_truncated_is(s.rollout_is_threshold))
    if s.rollout_rs is not None:
        upper = s.rollout_rs_threshold or ROLLOUT_RS_THRESHOLD[s.rollout_rs]
        reject = {"sequence": ratio.sequence_rejection, "geometric": ratio.geometric_rejection}
        parts.append(reject[s.rollout_rs](upper, s.rollout_rs_threshold_lower))
    return parts


def _kl_controller(s: MethodSettings) -> rewards.KLController:
    """β of the KL-in-reward shaper: fixed, or adaptive when a target KL is set."""
    if s.kl_in_reward_target is None:
        return rewards.fixed_kl_controller(s.kl_in_reward_coef)
    return rewards.adaptive_kl_controller(
        s.kl_in_reward_coef, s.kl_in_reward_target, s.kl_in_reward_horizon
    )


def _dual_clip(s: MethodSettings) -> Any:
    return ratio.vanilla(
        clip_ratio_low=s.clip_low, clip_ratio_high=s.clip_high, clip_ratio_c=s.clip_ratio_c
    )


def _gigpo(s: MethodSettings) -> Any:
    return advantage.gigpo(gamma=s.gamma, step_weight=s.step_weight, mode=s.gigpo_mode)


# ---------------------------------------------------------------------------------------------
# Builders: one per distinct composition; presets share them with other defaults.
# ---------------------------------------------------------------------------------------------


def grpo(s: MethodSettings) -> Objective:
    """GRPO: pooled-turn GRPO advantages + PPO dual clip."""
    return chain(advantage.grpo(), _dual_clip(s), *_generic(s))


def sapo(s: MethodSettings) -> Objective:
    """SAPO: GRPO advantages + soft gate (4/τ)·σ(τ(r − 1)), τ = τ+ if Ā > 0 else τ−."""
    loss = ratio.sapo(
        s.sapo_tau_pos, s.sapo_tau_neg, clip_ratio_low=s.clip_low, clip_ratio_high=s.clip_high
    )
    return chain(advantage.grpo(), loss, *_generic(s))


def cispo(s: MethodSettings) -> Objective:
    """CISPO: GRPO advantages + −sg(clip(r, 1−εl, 1+εh))·A·lp."""
    loss = ratio.cispo(clip_ratio_low=s.clip_low, clip_ratio_high=s.clip_high)
    return chain(advantage.grpo(), loss, *_generic(s))


def gspo(s: MethodSettings) -> Objective:
    """GSPO: GRPO advantages + turn-level geometric-mean ratio clip."""
    return chain(advantage.grpo(), ratio.gspo(s.clip_low, s.clip_high), *_generic(s))


def gigpo(s: MethodSettings) -> Objective:
    """GiGPO: A = A_episode + ω·A_step (anchor-state groups) + PPO dual clip."""
    return chain(_gigpo(s), _dual_clip(s), *_generic(s))


def gigpo_gspo(s: MethodSettings) -> Objective:
    """GiGPO advantages + GSPO turn-level clip: SAMPO's composition (with dynamic sampling)."""
    return chain(_gigpo(s), ratio.gspo(s.clip_low, s.clip_high), *_generic(s))


def empg(s: MethodSettings) -> Objective:
    """EMPG: A' = g(Ĥ)·A_GRPO + ζ·f(Ĥ_next), re-centred, + PPO dual clip."""
    estimator = advantage.empg(k=s.empg_k, k_f=s.empg_k_f, zeta=s.empg_zeta)
    return chain(estimator, _dual_clip(s), *_generic(s))


def dapo_grpo(s: MethodSettings) -> Objective:
    """DAPO_GRPO: GRPO + overlong shaping min(−(L − (L_max − B))/B·0.1, 0), B = L_max/5."""
    overlong = rewards.dapo_overlong(s.overlong_max_length)
    return chain(advantage.grpo(), overlong, _dual_clip(s), *_generic(s))


def dr_grpo(s: MethodSettings) -> Objective:
    """Dr.GRPO: A = s − mean (no std) and the dual-clip loss divided by L_max."""
    loss = ratio.dr_grpo(
        s.drgrpo_max_length,
        clip_ratio_low=s.clip_low,
        clip_ratio_high=s.clip_high,
        clip_ratio_c=s.clip_ratio_c,
    )
    return chain(advantage.drgrpo(), loss, *_generic(s))


def vanilla_grpo(s: MethodSettings) -> Objective:
    """Vanilla GRPO: the group pools per-trajectory mean scores."""
    return chain(advantage.vanilla_grpo(), _dual_clip(s), *_generic(s))


def rloo(s: MethodSettings) -> Objective:
    """RLOO: leave-one-out advantages over pooled turn rows."""
    return chain(advantage.rloo(), _dual_clip(s), *_generic(s))


def reinforce_pp(s: MethodSettings) -> Objective:
    """REINFORCE++: token-level discounted returns, whitened."""
    return chain(advantage.reinforce_plus_plus(gamma=s.gamma), _dual_clip(s), *_generic(s))


def reinforce_pp_baseline(s: MethodSettings) -> Objective:
    """REINFORCE++ with the group-mean baseline and token whitening."""
    return chain(advantage.reinforce_plus_plus_baseline(), _dual_clip(s), *_generic(s))


def ppo(s: MethodSettings) -> Objective:
    """PPO: GAE(γ, λ) advantages from critic values + dual clip; the recipe's row-local GAE, or
    along each trajectory with per-turn rewards (``gae_across_turns``)."""
    gae = advantage.multi_turn_gae if s.gae_across_turns else advantage.gae
    estimator = gae(gamma=s.gamma, lam=s.gae_lambda)
    return chain(estimator, _dual_clip(s), *_generic(s))


@dataclasses.dataclass(frozen=True)
class Preset:
    """A method: its builder, the fields it reads and its values that differ from the defaults."""

    build: Callable[[MethodSettings], Objective]
    knobs: tuple[str, ...]
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    doc: str = ""
    dimension: str = "other"  # the paper's axis of study (PAPER_DIMENSIONS), "other" outside it
    paper_name: str = ""  # how the paper's table writes it ("DAPO_GiGPO"); "" outside the table


NO_KL = {"use_kl_loss": False}
SMTM = "seq-mean-token-mean"
SEQ_MASK = {"use_seq_mask": True}
GSPO_CLIP = {"clip_low": 3e-3, "clip_high": 4e-3}
SAMPO_FILTER = {"dynamic_sampling": True, "max_num_gen_batches": 3, "cold_start_steps": 15}
GIGPO_KNOBS = ("gamma", "step_weight", "gigpo_mode")

PRESETS: dict[str, Preset] = {
    "grpo": Preset(grpo, GENERIC + DUAL_CLIP, {}, "GRPO, token-mean"),
    "grpo_st": Preset(
        grpo, GENERIC + DUAL_CLIP, {"loss_agg_mode": SMTM}, "GRPO, seq-mean-token-mean"
    ),
    "grpo_sm": Preset(grpo, GENERIC + DUAL_CLIP, SEQ_MASK, "GRPO + sequence masking"),
    "sapo": Preset(sapo, GENERIC + CLIP + ("sapo_tau_pos", "sapo_tau_neg"), {}, "SAPO soft gate"),
    "sapo_sm": Preset(
        sapo,
        GENERIC + CLIP + ("sapo_tau_pos", "sapo_tau_neg"),
        SEQ_MASK,
        "SAPO + sequence masking",
    ),
    "cispo": Preset(cispo, GENERIC + CLIP, {"clip_low": 1.0}, "CISPO, no lower clip"),
    "cispo_sm": Preset(
        cispo,
        GENERIC + CLIP,
        {"clip_low": 1.0, **SEQ_MASK},
        "CISPO + sequence masking",
    ),
    "gspo": Preset(
        gspo,
        GENERIC + CLIP,
        {**GSPO_CLIP, "loss_agg_mode": SMTM, "regularizer_agg_mode": "token-mean"},
        "GSPO; KL and entropy stay token-mean",
    ),
    "gigpo": Preset(gigpo, GENERIC + DUAL_CLIP + GIGPO_KNOBS, {}, "GiGPO, mean_std_norm"),
    "empg": Preset(
        empg, GENERIC + DUAL_CLIP + ("empg_k", "empg_k_f", "empg_zeta"), {}, "EMPG on GRPO"
    ),
    "dapo_grpo": Preset(
        dapo_grpo,
        GENERIC + DUAL_CLIP + ("overlong_max_length",),
        {"dynamic_sampling": True, "max_num_gen_batches": 2, "cold_start_steps": 15},
        "GRPO + dynamic sampling + overlong shaping",
    ),
    "dapo_gigpo": Preset(
        gigpo, GENERIC + DUAL_CLIP + GIGPO_KNOBS, SAMPO_FILTER, "GiGPO + dynamic sampling"
    ),
    "sampo": Preset(
        gigpo_gspo,
        GENERIC + CLIP + GIGPO_KNOBS,
        {**GSPO_CLIP, "loss_agg_mode": SMTM, **SAMPO_FILTER},
        "GiGPO + GSPO + dynamic sampling",
    ),
    "dr_grpo": Preset(
        dr_grpo,
        GENERIC + DUAL_CLIP + ("drgrpo_max_length",),
        {**NO_KL, "loss_agg_mode": "seq-mean-token-sum"},
        "Dr.GRPO, no KL",
    ),
    "vanilla_grpo": Preset(vanilla_grpo, GENERIC + DUAL_CLIP, NO_KL, "vanilla GRPO, no KL"),
    "rloo": Preset(rloo, GENERIC + DUAL_CLIP, {}, "RLOO"),
    "reinforce_pp": Preset(
        reinforce_pp, GENERIC + DUAL_CLIP + ("gamma",), NO_KL, "REINFORCE++, no KL"
    ),
    "reinforce_pp_baseline": Preset(
        reinforce_pp_baseline, GENERIC + DUAL_CLIP, NO_KL, "REINFORCE++ with baseline, no KL"
    ),
    "ppo": Preset(
        ppo,
        GENERIC + DUAL_CLIP + ("gamma", "gae_lambda", "gae_across_turns"),
        NO_KL,
        "GAE from a critic, no KL",
    ),
}


# The paper's results table, in its row order: method → (dimension, the name the table prints).
# GRPO_SM is in the paper's summary table only; it belongs with the other sequence masks.
PAPER_METHODS: dict[str, tuple[str, str]] = {
    "grpo": ("base", "GRPO"),
    "grpo_st": ("loss aggregation", "GRPO_ST"),
    "sapo": ("importance sampling", "SAPO"),
    "sapo_sm": ("importance sampling", "SAPO_SM"),
    "cispo": ("importance sampling", "CISPO"),
    "cispo_sm": ("importance sampling", "CISPO_SM"),
    "gspo": ("importance sampling", "GSPO"),
    "grpo_sm": ("importance sampling", "GRPO_SM"),
    "gigpo": ("advantage", "GiGPO"),
    "empg": ("advantage", "EMPG"),
    "dapo_grpo": ("dynamic sampling", "DAPO_GRPO"),
    "dapo_gigpo": ("dynamic sampling", "DAPO_GiGPO"),
    "sampo": ("ours (SAMPO)", "SAMPO"),
}
PAPER_DIMENSIONS = (
    "base",
    "loss aggregation",
    "importance sampling",
    "advantage",
    "dynamic sampling",
    "ours (SAMPO)",
)
for _key, (_dimension, _name) in PAPER_METHODS.items():
    PRESETS[_key] = dataclasses.replace(PRESETS[_key], dimension=_dimension, paper_name=_name)


def preset_key(name: str) -> str:
    """The registry key of ``name`` ("SAMPO", "DAPO_GiGPO", "Dr.GRPO" → sampo, dapo_gigpo, ...);
    an unknown name raises one line with the closest match."""
    key = name.lower().replace("-", "_").replace(".", "_")
    if key not in PRESETS:
        close = difflib.get_close_matches(key, list(PRESETS), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(PRESETS)}"
        raise ValueError(f"unknown method preset {name!r} ({hint})")
    return key


def unused_knobs(name: str, overrides: Mapping[str, Any]) -> list[str]:
    """The keys of ``overrides`` that the preset ``name`` does not read."""
    knobs = PRESETS[preset_key(name)].knobs
    return [key for key in overrides if key not in knobs]


def settings(name: str, **overrides: Any) -> MethodSettings:
    """The preset's :class:`MethodSettings`: shared defaults < the preset's < ``overrides``.

    Raises ValueError (one line) for an unknown preset, a field the preset does not read or a
    value out of range."""
    unused = unused_knobs(name, overrides)
    if unused:
        raise ValueError(
            f"method {preset_key(name)!r} does not read {', '.join(unused)} "
            f"(its settings: {', '.join(PRESETS[preset_key(name)].knobs)})"
        )
    preset = PRESETS[preset_key(name)]
    resolved = MethodSettings(**{**preset.defaults, **overrides})
    for field, message in invalid_settings(resolved):
        raise ValueError(f"{field} {message}")
    return resolved


def build(name: str, **overrides: Any) -> Objective:
    """The objective of preset ``name`` with ``overrides`` applied (see :func:`settings`)."""
    return PRESETS[preset_key(name)].build(settings(name, **overrides))
