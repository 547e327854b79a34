"""Per-token KL estimators between the policy and a reference (docs/algorithms.md §6.1, TV-3).

With d = logp − ref:

- ``k1`` (alias ``kl``): d
- ``abs``: |d|
- ``k2`` (alias ``mse``): ½·d²
- ``k3`` (alias ``low_var_kl``): with κ = clip(ref − logp, −20, 20), clip(e^κ − κ − 1, −10, 10)

verl's straight-through kinds ending in "+" raise there; here they are not offered.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

Array = jax.Array
KLEstimator = Callable[[Array, Array], Array]


def k1(logp: Array, ref: Array) -> Array:
    r"""$k_1 = \mathrm{logp} - \mathrm{ref}$ (unbiased, can be negative)."""
    return logp - ref


def absolute(logp: Array, ref: Array) -> Array:
    """|logp − ref|."""
    return jnp.abs(logp - ref)


def k2(logp: Array, ref: Array) -> Array:
    r"""$k_2 = \tfrac12(\mathrm{logp} - \mathrm{ref})^2$."""
    return 0.5 * jnp.square(logp - ref)


def k3(logp: Array, ref: Array) -> Array:
    r"""$k_3 = \mathrm{clip}(e^\kappa - \kappa - 1, -10, 10)$,
    $\kappa = \mathrm{clip}(\mathrm{ref} - \mathrm{logp}, -20, 20)$ (low-variance KL)."""
    kappa = jnp.clip(ref - logp, -20.0, 20.0)
    return jnp.clip(jnp.exp(kappa) - kappa - 1.0, -10.0, 10.0)


ESTIMATORS: dict[str, KLEstimator] = {
    "k1": k1,
    "kl": k1,
    "abs": absolute,
    "k2": k2,
    "mse": k2,
    "k3": k3,
    "low_var_kl": k3,
}


def estimator(kind: str) -> KLEstimator:
    """Return the estimator named ``kind`` (host-side lookup); one clear error otherwise."""
    try:
        return ESTIMATORS[kind]
    except KeyError:
        raise ValueError(
            f"unknown KL estimator {kind!r}; expected one of {sorted(ESTIMATORS)}"
        ) from None
