"""Optax-style composition of objective components into one :class:`Objective`.

A component is a small NamedTuple holding pure functions. Its *kind* (its type) says where it acts:

====================  ==========================================================================
kind                  role
====================  ==========================================================================
RewardShaper          before advantages: invalid penalty, overlong shaping, KL in reward
AdvantageEstimator    batch-level: token rewards -> advantages and returns (exactly one)
MaskTransform         per micro-batch: rewrite the policy-loss mask (sequence masking, Geo-RS)
PolicyLoss            per micro-batch: ratio / clipping -> ``[N, T]`` loss matrix (exactly one)
LossWeight            per micro-batch: multiply the loss matrix (truncated IS, Seq-TIS)
Aggregation           per micro-batch: loss matrix -> scalar (default token-mean)
Regularizer           per micro-batch: scalar terms added to the loss (KL, entropy)
GroupFilter           host-side dynamic sampling settings, read by the rollout driver
====================  ==========================================================================

``chain(*components)`` sorts components into these slots on the host; the resulting
``Objective.prepare`` and ``Objective.loss`` are pure functions of arrays that can be jitted and
differentiated. The trainer knows no algorithm by name: it only calls an ``Objective``.

Every component declares (:mod:`~arlarena_jax.objectives.declare`) the optional inputs it reads
(``needs``, a set of :class:`Input`) and the reduction of each metric it emits (``reductions``);
:attr:`Objective.requirements` and :attr:`Objective.metric_reductions` collect them, and
:func:`check_requirements` refuses an objective whose inputs a trainer cannot provide. Shaper
state is a tuple with one entry per shaper, in order (as ``optax.chain`` keeps its states).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from arlarena_jax.objectives.aggregate import Aggregation, token_mean
from arlarena_jax.objectives.batch import TurnBatch, without_padding
from arlarena_jax.objectives.declare import (
    Input,
    MetricTable,
    Needs,
    Reduction,
    means,
    merge_tables,
)
from arlarena_jax.objectives.stats import last_token_onehot

Array = jax.Array
Metrics = dict[str, Array]
State = dict[str, Array]  # the state one reward shaper owns
ObjectiveState = tuple[State, ...]  # one entry per shaper, in the objective's order
NONE: Needs = frozenset()
LOSS_METRICS: MetricTable = means("num_masked_seqs", "pg_loss", "loss")  # Objective.loss's own


class RewardShaper(NamedTuple):
    """``fn(batch, state) -> (batch, state, metrics)``; ``init() -> state``, the state it owns.

    ``needs``: the inputs ``fn`` reads; ``reductions``: one (key, Reduction) per metric it emits.
    """

    name: str
    fn: Callable[[TurnBatch, State], tuple[TurnBatch, State, Metrics]]
    init: Callable[[], State] = dict
    needs: Needs = NONE
    reductions: MetricTable = ()


class AdvantageEstimator(NamedTuple):
    """``fn(batch) -> (advantages [N,T], returns [N,T])`` over the whole batch.

    ``anchor_similarity`` asks the host to build anchor ids by text similarity (GiGPO,
    docs/algorithms.md §3.9) instead of exact equality; ``None`` means exact.
    """

    name: str
    fn: Callable[[TurnBatch], tuple[Array, Array]]
    anchor_similarity: float | None = None
    needs: Needs = NONE


class MaskTransform(NamedTuple):
    """``fn(log_probs, batch, mask) -> (mask, metrics)``: the mask the policy loss uses."""

    name: str
    fn: Callable[[Array, TurnBatch, Array], tuple[Array, Metrics]]
    needs: Needs = NONE
    reductions: MetricTable = ()


class PolicyLoss(NamedTuple):
    """``fn(log_probs, batch, mask) -> (loss_matrix [N,T], metrics)``.

    Metrics follow docs/algorithms.md §4: ``pg_clipfrac``, ``pg_clipfrac_lower``, ``ppo_kl``, each a
    masked mean over ``mask``.
    """

    name: str
    fn: Callable[[Array, TurnBatch, Array], tuple[Array, Metrics]]
    needs: Needs = NONE
    reductions: MetricTable = ()


class LossWeight(NamedTuple):
    """``fn(log_probs, batch) -> ([N,T] multiplier, metrics)`` applied to the policy loss matrix.

    ``batch.response_mask`` is the micro-batch's mask of real rows (before mask transforms).
    """

    name: str
    fn: Callable[[Array, TurnBatch], tuple[Array, Metrics]]
    needs: Needs = NONE
    reductions: MetricTable = ()


class Regularizer(NamedTuple):
    """``fn(log_probs, entropy, batch, aggregation) -> (term, metrics)``; ``term`` is added."""

    name: str
    fn: Callable[[Array, Array | None, TurnBatch, Aggregation], tuple[Array, Metrics]]
    needs: Needs = NONE
    reductions: MetricTable = ()


class GroupFilter(NamedTuple):
    """Dynamic sampling settings (docs/algorithms.md §7), applied on the host by the rollout
    driver."""

    max_num_gen_batches: int = 10
    cold_start_steps: int = 0

    def is_active(self, global_step: int, training: bool = True) -> bool:
        """Active iff training and ``global_step > cold_start_steps`` (steps start at 1)."""
        return training and global_step > self.cold_start_steps


class Objective(NamedTuple):
    """A composed objective. Build it with :func:`chain`."""

    advantage: AdvantageEstimator
    policy_loss: PolicyLoss
    aggregation: Aggregation = token_mean()
    shapers: tuple[RewardShaper, ...] = ()
    mask_transforms: tuple[MaskTransform, ...] = ()
    loss_weights: tuple[LossWeight, ...] = ()
    regularizers: tuple[Regularizer, ...] = ()
    group_filter: GroupFilter | None = None

    @property
    def anchor_similarity(self) -> float | None:
        return self.advantage.anchor_similarity

    @property
    def components(self) -> tuple[Any, ...]:
        """Every declaring component, in the order they act (shapers first)."""
        return (
            *self.shapers,
            self.advantage,
            *self.mask_transforms,
            self.policy_loss,
            *self.loss_weights,
            *self.regularizers,
        )

    @property
    def requirements(self) -> Needs:
        """The union of the components' declared inputs (what the trainer must compute)."""
        return frozenset().union(*(c.needs for c in self.components))

    @property
    def metric_reductions(self) -> dict[str, Reduction]:
        """``{key: Reduction}`` for every metric ``prepare`` and ``loss`` can emit (declared)."""
        emitting = (
            *self.shapers,
            *self.mask_transforms,
            self.policy_loss,
            *self.loss_weights,
            *self.regularizers,
        )
        tables = [("Objective.loss", LOSS_METRICS)] + [(c.name, c.reductions) for c in emitting]
        return merge_tables(tables)

    def init_state(self) -> ObjectiveState:
        """State carried between steps: one entry per shaper, ``shaper.init()`` (e.g. the
        adaptive KL-in-reward coefficient); two stateful shapers never share an entry."""
        return tuple(shaper.init() for shaper in self.shapers)

    def prepare(
        self, batch: TurnBatch, state: ObjectiveState | None = None
    ) -> tuple[TurnBatch, ObjectiveState, Metrics]:
        """Rewards -> shaped rewards -> advantages over the whole batch (docs/algorithms.md §1.3).

        The episode return is placed on the last response token of every row (the episode
        reward manager, docs/algorithms.md §1.3); shapers then adjust token rewards, each with its
        own entry of ``state``, and the estimator fills ``advantages`` and ``returns``.
        """
        state = self.init_state() if state is None else tuple(state)
        if len(state) != len(self.shapers):
            raise ValueError(
                f"Objective.prepare got a state of {len(state)} entries for "
                f"{len(self.shapers)} reward shapers: pass Objective.init_state()"
            )
        batch = without_padding(batch)
        mask = batch.response_mask
        placed = batch.episode_returns[:, None] * last_token_onehot(mask) * batch.row_mask[:, None]
        batch = batch._replace(
            token_rewards=placed, step_reward_adjust=jnp.zeros_like(batch.episode_returns)
        )
        metrics: Metrics = {}
        new_state = []
        for shaper, own in zip(self.shapers, state, strict=True):
            batch, own, shaper_metrics = shaper.fn(batch, own)
            new_state.append(own)
            metrics.update(shaper_metrics)
        advantages, returns = self.advantage.fn(batch)
        keep = mask * batch.row_mask[:, None]
        batch = batch._replace(advantages=advantages * keep, returns=returns * keep)
        return batch, tuple(new_state), metrics

    def loss(
        self, log_probs: Array, batch: TurnBatch, entropy: Array | None = None
    ) -> tuple[Array, Metrics]:
        """Total loss of one micro-batch: pg_loss + Σ regularizer terms (docs/algorithms.md §6).

        ``log_probs`` are the current policy's token log-probs ``[N, T]`` (the argument to
        differentiate); ``entropy`` the current token entropies, needed by an entropy bonus.
        ``batch`` is (a micro-batch slice of) the output of :meth:`prepare`, whose padding is
        already zeroed; here only ``log_probs`` and ``entropy`` are cleaned of padding values.
        """
        if batch.advantages is None:
            raise ValueError("TurnBatch.advantages is None: call Objective.prepare(batch) first")
        # The batch fields were cleaned once by prepare(); only the fresh model outputs are.
        mask = jnp.where(batch.row_mask[:, None] > 0, batch.response_mask, 0.0)
        batch = batch._replace(response_mask=mask)
        log_probs = jnp.where(mask > 0, log_probs, 0.0)
        if entropy is not None:
            entropy = jnp.where(mask > 0, entropy, 0.0)
        metrics: Metrics = {"num_masked_seqs": jnp.zeros((), jnp.float32)}
        pg_mask = mask
        for transform in self.mask_transforms:
            pg_mask, transform_metrics = transform.fn(log_probs, batch, pg_mask)
            metrics.update(transform_metrics)
        loss_matrix, pg_metrics = self.policy_loss.fn(log_probs, batch, pg_mask)
        metrics.update(pg_metrics)
        for weight in self.loss_weights:
            factor, weight_metrics = weight.fn(log_probs, batch)
            loss_matrix = loss_matrix * factor
            metrics.update(weight_metrics)
        pg_loss = self.aggregation(loss_matrix, pg_mask, batch.row_mask)
        metrics["pg_loss"] = pg_loss
        total = pg_loss
        for regularizer in self.regularizers:
            term, reg_metrics = regularizer.fn(log_probs, entropy, batch, self.aggregation)
            total = total + term
            metrics.update(reg_metrics)
        metrics["loss"] = total
        return total, metrics


_SLOTS: dict[type, str] = {
    RewardShaper: "shapers",
    MaskTransform: "mask_transforms",
    LossWeight: "loss_weights",
    Regularizer: "regularizers",
}
_SINGLE: dict[type, str] = {
    AdvantageEstimator: "advantage",
    PolicyLoss: "policy_loss",
    Aggregation: "aggregation",
    GroupFilter: "group_filter",
}


def chain(*components: Any) -> Objective:
    """Compose components into an :class:`Objective` (host-side, at build time).

    Exactly one ``AdvantageEstimator`` and one ``PolicyLoss`` are required; at most one
    ``Aggregation`` (default token-mean) and one ``GroupFilter``. Shapers, mask transforms, loss
    weights and regularizers apply in the order given.
    """
    many: dict[str, list] = {slot: [] for slot in _SLOTS.values()}
    single: dict[str, Any] = {}
    for component in components:
        kind = type(component)
        if kind in _SLOTS:
            many[_SLOTS[kind]].append(component)
        elif kind in _SINGLE:
            slot = _SINGLE[kind]
            if slot in single:
                raise ValueError(
                    f"chain() got two {kind.__name__} components: {_describe(single[slot])} and "
                    f"{_describe(component)}; an objective has exactly one"
                )
            single[slot] = component
        else:
            raise TypeError(
                f"chain() got {component!r}, which is not an objective component "
                "(build components with arlarena_jax.objectives.{advantage,ratio,aggregate,...})"
            )
    for required, kind in (("advantage", "AdvantageEstimator"), ("policy_loss", "PolicyLoss")):
        if required not in single:
            raise ValueError(f"chain() needs one {kind} component; none was given")
    objective = Objective(**single, **{slot: tuple(items) for slot, items in many.items()})
    objective.metric_reductions  # noqa: B018  (raises if two components disagree on a metric)
    return objective


def check_requirements(objective: Objective, available: set[Input] | frozenset[Input]) -> None:
    """Raise a one-line ``ValueError`` naming the first component (in acting order) that needs
    an input outside ``available``, e.g. "component 'gae' needs critic values, which this
    trainer cannot provide"."""
    for component in objective.components:
        for needed in Input:  # the enum's order, so the message does not depend on set order
            if needed in component.needs and needed not in available:
                raise ValueError(
                    f"component {component.name!r} needs {needed.value}, which this trainer "
                    "cannot provide"
                )


def _describe(component: Any) -> str:
    return getattr(component, "name", type(component).__name__)
