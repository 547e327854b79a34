"""Runs whose importance ratio never moved: on-policy updates, where clipping cannot act.

With one mini-batch and one epoch per rollout (``trainer.mini_batch_size`` at least the step's
rows), the policy that scores a mini-batch is the one that sampled it, so every ratio
π_θ / π_old is 1: ``actor/ppo_kl`` (the mean of log π_old − log π_θ) stays at 0 up to float
noise and ``actor/pg_clipfrac`` at exactly 0. The importance-sampling methods (GSPO, SAPO,
CISPO, ...) then differ from each other only by what their losses do at ratio 1, so a report of
such runs says so instead of letting their rows read as a comparison of clipping.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from arlarena_jax.arena.report.runs import Run

RATIO_KEY, CLIP_KEY = "actor/ppo_kl", "actor/pg_clipfrac"
RATIO_TOLERANCE = 1e-5  # |ppo_kl| up to this is float noise (the arena's on-policy runs: ≤ 4e-7)


def _logged(run: Run, key: str) -> np.ndarray | None:
    series = run.scalars.get(key)
    return None if series is None or not len(series.values) else series.values


def updated(run: Run) -> bool:
    """Whether the run logged RL updates' ratio metrics (a cloning-only run did not)."""
    return _logged(run, RATIO_KEY) is not None and _logged(run, CLIP_KEY) is not None


def never_clipped(run: Run) -> bool:
    """Whether the run logged RL updates with |ppo_kl| ≤ RATIO_TOLERANCE and a clip fraction of
    0 at every one of them."""
    ratio, clip = _logged(run, RATIO_KEY), _logged(run, CLIP_KEY)
    if ratio is None or clip is None:
        return False
    return bool(np.max(np.abs(ratio)) <= RATIO_TOLERANCE and np.max(clip) == 0)


def on_policy_note(runs: Sequence[Run], names: Sequence[str]) -> str | None:
    """A sentence naming the runs with RL updates that never clipped (``names``: how the report
    names each of ``runs``): all of them, some, or None for none."""
    named = [(run, name) for run, name in zip(runs, names, strict=True) if updated(run)]
    quiet = [name for run, name in named if never_clipped(run)]
    if not quiet:
        return None
    how = (
        f"|{RATIO_KEY}| ≤ {RATIO_TOLERANCE:g} and {CLIP_KEY} 0 at every RL step: its updates "
        "were on-policy (one mini-batch per rollout), so no ratio was ever clipped and the "
        "importance-sampling methods differ only by their losses at ratio 1."
    )
    if len(named) == 1:
        return f"The one run with RL updates here had {how}"
    how = how.replace("its updates", "their updates")
    if len(quiet) == len(named):
        return f"All {len(named)} runs with RL updates here had {how}"
    return f"{len(quiet)} of {len(named)} runs with RL updates ({', '.join(quiet)}) had {how}"
