"""The end of a run: the final evaluation, the Hugging Face export and the record of a complete
run (``run_dir/final.json``, :mod:`~arlarena_jax.train.final`), done by :class:`Finish`; and the
:class:`Summary` a run returns, finished or stopped (:func:`complete_summary` reads a complete
run's back without building anything).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
from flax import nnx

from arlarena_jax.train.config import Config
from arlarena_jax.train.critic import exportable_critic
from arlarena_jax.train.export import export_critic, export_policy, whole_params
from arlarena_jax.train.final import complete_record, final_record, write_final
from arlarena_jax.train.learner import Learner
from arlarena_jax.train.pieces import Pieces
from arlarena_jax.train.resolution import Resolved, resolve
from arlarena_jax.train.run_state import HostState
from arlarena_jax.train.stops import Stops


@dataclasses.dataclass
class Summary:
    """What a run reports at the end (also printed as a table)."""

    success_after_cloning: float | None
    success_after_rl: float | None
    steps: int
    stability_events: int
    skipped_updates: int
    seconds: float
    run_dir: str
    history: list[dict[str, float]] = dataclasses.field(default_factory=list)
    final_eval: dict[str, float] = dataclasses.field(default_factory=dict)  # val/… at the end
    stopped: str | None = None  # e.g. "SIGTERM during cloning at step 37 of 260"; None: finished
    already_complete: bool = False  # the run was complete before this start: nothing was done


def complete_summary(config: Config | Resolved) -> Summary | None:
    """The summary of a run of ``config`` that its ``final.json`` records as complete
    (:func:`~arlarena_jax.train.final.complete_record`), read without building anything; None
    when there is work to do."""
    t = resolve(config).trainer
    record = complete_record(t.run_dir, t.total_steps, t.export_hf)
    if record is None:
        return None
    final_eval = record.get("final_eval") or {}
    return Summary(
        record.get("sft_success"),
        final_eval.get("val/success_rate"),
        record["step"],
        int(record.get("stability_events", 0)),
        int(record.get("skipped", 0)),
        0.0,
        str(t.run_dir),
        final_eval=final_eval,
        already_complete=True,
    )


class Finish:
    """The end of the schedule: the final evaluation (``evaluate``, at a step), the export of
    ``learner``'s state with ``model``'s architecture and ``tokenizer``, and ``final.json``. A
    stop during the export stops the run (``stops``): the next start exports again, reading the
    final evaluation from the record."""

    def __init__(
        self,
        config: Config,
        run_dir: Path,
        learner: Learner,
        pieces: Pieces,
        stops: Stops,
        evaluate: Callable[[int], dict[str, float]],
    ) -> None:
        self.config, self.run_dir, self.learner = config, run_dir, learner
        self.pieces, self.stops, self.evaluate = pieces, stops, evaluate

    def evaluate_and_export(self, host: HostState, untouched: bool) -> dict[str, Any]:
        """The record of the last step, its final evaluation and export done (``untouched``:
        this start trained no further than the step it resumed, see
        :func:`~arlarena_jax.train.final.final_record`)."""
        t = self.config.trainer
        record = final_record(self.run_dir, host.step, host.sft_success, untouched)
        if t.total_steps > 0 and record["final_eval"] is None:
            self.stops.phase = "the final evaluation"
            record["final_eval"] = self.evaluate(host.step)
            self._write(record)
        if t.export_hf:
            self.stops.phase = "export"
            self.stops.check()
            self.export()
            self.stops.check()  # a stop that arrived during the export
            record["exported"] = True
        return record

    def record_complete(self, record: dict[str, Any], summary: Summary) -> None:
        """Mark the run complete in ``final.json``, with the summary's counts."""
        record |= dict(
            complete=True,
            stability_events=summary.stability_events,
            skipped=summary.skipped_updates,
        )
        self._write(record)

    def export(self) -> None:
        """The Hugging Face export of the policy (``run_dir/hf``) and of the critic if any."""
        state, model, tokenizer = (
            self.learner.train_state(),
            self.pieces.model,
            self.pieces.tokenizer,
        )
        x = self.pieces.exchange  # several processes: process 0 writes (export_policy)
        export_policy(self.run_dir / "hf", model, state.params, tokenizer, self.config, x)
        if state.critic is not None:
            nnx.update(self.learner.critic_module, whole_params(state.critic_params))
            critic = exportable_critic(self.learner.critic_module, model)
            directory = self.run_dir / "hf_critic"
            x.first_then_all("critic exported", lambda: export_critic(directory, critic, tokenizer))

    def _write(self, record: dict[str, Any]) -> None:
        if jax.process_index() == 0:
            write_final(self.run_dir, record)
