"""The checkpoint and resume policy of a run: what is saved when, and what a start restores.

RL checkpoints live in ``run_dir/checkpoints`` (:class:`~arlarena_jax.train.checkpoint.
Checkpointer`): every ``trainer.save_every`` steps (:meth:`RunCheckpoints.save`), the starting
policy as step 0 (with cloning, or as the first rollback target), the state a stop interrupted, the
cloned policy of a run without RL steps; a start restores the newest one that verifies
(:meth:`RunCheckpoints.restore`), and an unstable step rolls back to the newest good one
(:meth:`RunCheckpoints.roll_back`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from flax import nnx

from arlarena_jax.train.checkpoint import Checkpointer, abstract_like
from arlarena_jax.train.config import Config
from arlarena_jax.train.layout import checkpoints_dir
from arlarena_jax.train.learner import Learner, roll_back
from arlarena_jax.train.monitor import StabilityMonitor
from arlarena_jax.train.run_state import HostState


class RunCheckpoints:
    """Saves and restores of ``learner``'s state with the host state; ``monitor`` marks the good
    steps; ``pieces``: the writer (flushed before a save), the model and the sampler."""

    def __init__(
        self,
        config: Config,
        run_dir: Path,
        closing: contextlib.ExitStack,
        learner: Learner,
        monitor: StabilityMonitor,
        pieces,
    ) -> None:
        t = config.trainer
        checkpointer = Checkpointer(
            checkpoints_dir(run_dir), keep=t.keep_checkpoints, save_every=max(t.save_every, 1)
        )
        self.checkpointer = closing.enter_context(checkpointer)
        self.config, self.learner, self.monitor, self.pieces = config, learner, monitor, pieces

    def restore(self, step: int | None = None) -> tuple[int, dict] | None:
        """Restore the newest checkpoint that verifies and restores into the learner's state and
        the model; its step and host state, or None. A newer one that fails to restore is set
        aside, with one line on stderr naming its file and why (missing, truncated or
        unreadable). ``step``: restore that one instead (nothing is set aside)."""
        target = abstract_like(self.learner.train_state().as_tree())
        if step is not None:
            tree, host = self.checkpointer.restore(target, step)
        else:
            restored = self.checkpointer.restore_latest_valid(target)
            if restored is None:
                return None
            step, tree, host, _ = restored  # a skipped step: reported by the checkpointer
        self.learner.state = self.learner.train_state().restored(tree)
        nnx.update(self.pieces.model, self.learner.state.params)
        return step, host

    def save(self, host: HostState, *, force: bool = False) -> bool:
        """Checkpoint the state at ``host.step`` if due (or ``force``). The metrics written so
        far are flushed to disk first: every step a checkpoint covers keeps its scalars."""
        step = host.step
        if not force and not self.checkpointer.should_save(step):
            return False
        if self.pieces.writer_opened is not None:
            self.pieces.writer.flush()
        good = self.monitor.mark_checkpoint(step)
        tree = self.learner.train_state().as_tree()
        return self.checkpointer.save(step, tree, dataclasses.asdict(host), force=True, good=good)

    def save_start(self, host: HostState) -> None:
        """Save the starting policy as step 0 (replacing one a stop during its evaluation saved)
        and wait for it."""
        if 0 in self.checkpointer.all_steps():
            self.checkpointer.discard_after(-1)
        self.save(host, force=True)
        self.checkpointer.wait()

    def save_unsaved(self, host: HostState, *, cloned: bool) -> None:
        """Save the RL state if there is one (``cloned``, or trained) that no checkpoint holds
        (after a stop), and wait for every save."""
        if (host.step > 0 or cloned) and host.step not in self.checkpointer.all_steps():
            self.save(host, force=True)
        self.checkpointer.wait()

    def save_cloned(self, host: HostState) -> None:
        """At the end: keep the cloned policy of a run without RL steps; wait for every save."""
        if host.step == 0 and 0 not in self.checkpointer.all_steps():
            self.save(host, force=True)
        self.checkpointer.wait()

    def roll_back(self, step: int) -> dict[str, float]:
        """Restore the newest good checkpoint's state (:func:`~arlarena_jax.train.learner.
        roll_back`) after the unstable step ``step``."""
        state, lora = self.learner.train_state(), self.config.model.lora
        engine, place = self.pieces.engine, self.learner.for_sampler
        return roll_back(self.checkpointer, self.monitor, state, engine, step, lora, place)
