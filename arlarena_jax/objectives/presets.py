"""The paper's methods as compositions of objective components (spec §5.11, §8, §9).

Each preset is a plain function ``preset(env="alfworld") -> Objective`` built only from public
components; the registry :data:`PRESETS` maps the paper's method names to them. ``env`` selects
the ALFWorld (``alfworld``) or WebShop (``webshop``) script settings where they differ. Sokoban
has no released scripts for these methods (spec §8.3, §9.3), so ``sokoban`` uses the ALFWorld
recipe.

Settings shared by every agentic script (spec §9.1): invalid-action penalty 0.1, k3 KL loss with
coefficient 0.01, entropy bonus 0.001, token-mean aggregation, PPO clip 0.2 with dual clip 3.
Methods from the authors' internal WebShop scripts (Dr.GRPO, vanilla GRPO, REINFORCE++, PPO) run
without the KL loss, as those scripts do.

Deliberate differences from the release, all documented in the spec: the DAPO filter is active
on WebShop too (the release never passes the step, §7), and ``sampo`` on ALFWorld maps to GiGPO
advantages + GSPO loss as the WebShop trainer does (§8.3).
"""

from __future__ import annotations

from collections.abc import Callable

from arlarena_jax.objectives import advantage, ratio, regularize, rewards
from arlarena_jax.objectives import aggregate as agg
from arlarena_jax.objectives.compose import GroupFilter, Objective, chain

ENVIRONMENTS = ("alfworld", "webshop", "sokoban")

INVALID_ACTION_PENALTY = 0.1
KL_COEF = 0.01
ENTROPY_COEF = 1e-3
GAMMA = 0.95
SEQ_MASK_DELTA = 3e-3  # every agentic _SM script (spec §3.2)
MAX_RESPONSE_LENGTH = 512  # data.max_response_length of the ALFWorld and WebShop scripts


def _check_env(env: str) -> str:
    if env not in ENVIRONMENTS:
        raise ValueError(f"unknown preset environment {env!r}; expected one of {ENVIRONMENTS}")
    return env


def _common(*, kl: bool = True, aggregation: agg.Aggregation | None = None) -> tuple:
    """Invalid penalty, KL (k3, 0.01) and entropy (0.001) terms shared by the scripts."""
    parts: list = [rewards.invalid_action_penalty(INVALID_ACTION_PENALTY)]
    if kl:
        parts.append(regularize.kl("k3", KL_COEF, aggregation=aggregation))
    parts.append(regularize.entropy(ENTROPY_COEF, aggregation=aggregation))
    return tuple(parts)


def grpo(env: str = "alfworld") -> Objective:
    """GRPO: pooled-turn GRPO advantages + PPO dual clip, token-mean (spec §5.1, §3.1)."""
    _check_env(env)
    return chain(advantage.grpo(), ratio.vanilla(), agg.token_mean(), *_common())


def grpo_st(env: str = "alfworld") -> Objective:
    """GRPO_ST: GRPO with seq-mean-token-mean aggregation (spec §9.1)."""
    _check_env(env)
    return chain(advantage.grpo(), ratio.vanilla(), agg.seq_mean_token_mean(), *_common())


def grpo_sm(env: str = "alfworld") -> Objective:
    """GRPO_SM: GRPO + off-policy sequence masking, δ = 3e-3 as in the agentic SM scripts."""
    _check_env(env)
    return chain(
        advantage.grpo(),
        ratio.sequence_mask(SEQ_MASK_DELTA),
        ratio.vanilla(),
        agg.token_mean(),
        *_common(),
    )


def sapo(env: str = "alfworld") -> Objective:
    """SAPO: soft gate with τ+ = 1.0, τ− = 1.05 (spec §3.6).

    The WebShop release script also turns on sequence masking (δ = 3e-3), so ``webshop`` does.
    """
    masks = (ratio.sequence_mask(SEQ_MASK_DELTA),) if _check_env(env) == "webshop" else ()
    return chain(advantage.grpo(), *masks, ratio.sapo(1.0, 1.05), agg.token_mean(), *_common())


def sapo_sm(env: str = "alfworld") -> Objective:
    """SAPO_SM: SAPO + sequence masking, δ = 3e-3 (spec §9.1)."""
    _check_env(env)
    return chain(
        advantage.grpo(),
        ratio.sequence_mask(SEQ_MASK_DELTA),
        ratio.sapo(1.0, 1.05),
        agg.token_mean(),
        *_common(),
    )


def cispo(env: str = "alfworld") -> Objective:
    """CISPO: clip_ratio_low = 1.0 (no lower bound), high 0.2 (spec §3.7).

    The WebShop release script adds sequence masking (δ = 3e-3), so ``webshop`` does.
    """
    masks = (ratio.sequence_mask(SEQ_MASK_DELTA),) if _check_env(env) == "webshop" else ()
    loss = ratio.cispo(clip_ratio_low=1.0, clip_ratio_high=0.2)
    return chain(advantage.grpo(), *masks, loss, agg.token_mean(), *_common())


def cispo_sm(env: str = "alfworld") -> Objective:
    """CISPO_SM: CISPO + sequence masking, δ = 3e-3 (spec §9.1)."""
    _check_env(env)
    return chain(
        advantage.grpo(),
        ratio.sequence_mask(SEQ_MASK_DELTA),
        ratio.cispo(clip_ratio_low=1.0, clip_ratio_high=0.2),
        agg.token_mean(),
        *_common(),
    )


def gspo(env: str = "alfworld") -> Objective:
    """GSPO: turn-level geometric-mean ratio, pg loss seq-mean-token-mean (spec §3.5, §9).

    ALFWorld: ε = (3e-3, 4e-3), KL and entropy stay token-mean (the script's loss_agg_mode).
    WebShop: ε = (3e-2, 4e-2) and loss_agg_mode = seq-mean-token-mean for every term.
    """
    if _check_env(env) == "webshop":
        smtm = agg.seq_mean_token_mean()
        return chain(advantage.grpo(), ratio.gspo(3e-2, 4e-2), smtm, *_common())
    return chain(
        advantage.grpo(),
        ratio.gspo(3e-3, 4e-3),
        agg.seq_mean_token_mean(),
        *_common(aggregation=agg.token_mean()),
    )


def gigpo(env: str = "alfworld") -> Objective:
    """GiGPO: episode + anchor-state step advantages, ω = 1, mean_std_norm, γ = 0.95 (§5.9)."""
    _check_env(env)
    estimator = advantage.gigpo(gamma=GAMMA, step_weight=1.0, mode="mean_std_norm")
    return chain(estimator, ratio.vanilla(), agg.token_mean(), *_common())


def empg(env: str = "alfworld") -> Objective:
    """EMPG: entropy-modulated GRPO advantages, k = k_f = 1, ζ = 0.05 (spec §5.10)."""
    _check_env(env)
    return chain(advantage.empg(), ratio.vanilla(), agg.token_mean(), *_common())


def dapo_grpo(env: str = "alfworld") -> Objective:
    """DAPO_GRPO: GRPO + dynamic sampling + overlong shaping; no clip-higher (spec §6.2, §7).

    ``max_num_gen_batches`` is 2 (the trainer forces it for ``dapo``); cold start 15 steps on
    ALFWorld, 0 on WebShop.
    """
    cold_start = 0 if _check_env(env) == "webshop" else 15
    return chain(
        advantage.grpo(),
        rewards.dapo_overlong(MAX_RESPONSE_LENGTH),
        ratio.vanilla(),
        agg.token_mean(),
        GroupFilter(max_num_gen_batches=2, cold_start_steps=cold_start),
        *_common(),
    )


def dapo_gigpo(env: str = "alfworld") -> Objective:
    """DAPO_GiGPO: GiGPO + dynamic sampling, without overlong shaping.

    No script was released; the filter settings are SAMPO's (3 tries, cold start 15 on
    ALFWorld, 5 on WebShop), an inference recorded in spec §9.1.
    """
    cold_start = 5 if _check_env(env) == "webshop" else 15
    return chain(
        advantage.gigpo(gamma=GAMMA, step_weight=1.0, mode="mean_std_norm"),
        ratio.vanilla(),
        agg.token_mean(),
        GroupFilter(max_num_gen_batches=3, cold_start_steps=cold_start),
        *_common(),
    )


def sampo(env: str = "alfworld") -> Objective:
    """SAMPO = GiGPO advantages + GSPO turn-level clipping + dynamic sampling (spec §8).

    ε = (3e-3, 4e-3), every term aggregated seq-mean-token-mean, k3 KL 0.01, entropy 0.001,
    invalid penalty 0.1, γ = 0.95, ω = 1; filter with 3 tries. ALFWorld: mean_std_norm and
    cold start 15; WebShop: the yaml default mean_norm and cold start 5.
    """
    webshop = _check_env(env) == "webshop"
    return chain(
        advantage.gigpo(
            gamma=GAMMA, step_weight=1.0, mode="mean_norm" if webshop else "mean_std_norm"
        ),
        ratio.gspo(3e-3, 4e-3),
        agg.seq_mean_token_mean(),
        GroupFilter(max_num_gen_batches=3, cold_start_steps=5 if webshop else 15),
        *_common(),
    )


def dr_grpo(env: str = "alfworld") -> Objective:
    """Dr.GRPO: no std division, seq-mean-token-sum / L_max with L_max = 500 (spec §3.4, §5.3)."""
    _check_env(env)
    smts = agg.seq_mean_token_sum()
    return chain(advantage.drgrpo(), ratio.dr_grpo(500), smts, *_common(kl=False))


def vanilla_grpo(env: str = "alfworld") -> Objective:
    """Vanilla GRPO: pool = per-trajectory mean scores (spec §5.2); no KL loss."""
    _check_env(env)
    return chain(advantage.vanilla_grpo(), ratio.vanilla(), agg.token_mean(), *_common(kl=False))


def rloo(env: str = "alfworld") -> Objective:
    """RLOO leave-one-out advantages over pooled turn rows (spec §5.4) with the GRPO recipe."""
    _check_env(env)
    return chain(advantage.rloo(), ratio.vanilla(), agg.token_mean(), *_common())


def reinforce_pp(env: str = "alfworld") -> Objective:
    """REINFORCE++: token-level discounted returns (γ = 0.95), whitened (spec §5.6); no KL."""
    _check_env(env)
    estimator = advantage.reinforce_plus_plus(gamma=GAMMA)
    return chain(estimator, ratio.vanilla(), agg.token_mean(), *_common(kl=False))


def reinforce_pp_baseline(env: str = "alfworld") -> Objective:
    """REINFORCE++ with the group-mean baseline and token whitening (spec §5.5); no KL."""
    _check_env(env)
    estimator = advantage.reinforce_plus_plus_baseline()
    return chain(estimator, ratio.vanilla(), agg.token_mean(), *_common(kl=False))


def ppo(env: str = "alfworld") -> Objective:
    """PPO-style vanilla: GAE (γ = 0.95, λ = 1) from critic values + dual clip (spec §5.7)."""
    _check_env(env)
    estimator = advantage.gae(gamma=GAMMA, lam=1.0)
    return chain(estimator, ratio.vanilla(), agg.token_mean(), *_common(kl=False))


PRESETS: dict[str, Callable[[str], Objective]] = {
    "grpo": grpo,
    "grpo_st": grpo_st,
    "grpo_sm": grpo_sm,
    "sapo": sapo,
    "sapo_sm": sapo_sm,
    "cispo": cispo,
    "cispo_sm": cispo_sm,
    "gspo": gspo,
    "gigpo": gigpo,
    "empg": empg,
    "dapo_grpo": dapo_grpo,
    "dapo_gigpo": dapo_gigpo,
    "sampo": sampo,
    "dr_grpo": dr_grpo,
    "vanilla_grpo": vanilla_grpo,
    "rloo": rloo,
    "reinforce_pp": reinforce_pp,
    "reinforce_pp_baseline": reinforce_pp_baseline,
    "ppo": ppo,
}


def build(name: str, env: str = "alfworld") -> Objective:
    """The preset ``name`` (case-insensitive: ``"SAMPO"``, ``"DAPO_GiGPO"``, ...) for ``env``."""
    key = name.lower().replace("-", "_").replace(".", "_")
    if key not in PRESETS:
        raise ValueError(f"unknown method preset {name!r}; expected one of {sorted(PRESETS)}")
    return PRESETS[key](env)
