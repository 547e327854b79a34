"""Behaviour cloning of a run on expert demonstrations (``sft.*``), or the adoption of a shared
start's cloned policy (``sft.init_from``), and continued cloning after either
(``sft.continue_steps``: more steps from the start's policy, with a fresh optimizer).

A stopped cloning first saves its state (parameters, optimizer state, steps done) in
``run_dir/checkpoints_sft``; cloning also saves it every ``sft.save_every_s`` seconds of cloning
and after its last step, and its demonstrations are kept in ``run_dir/demonstrations.jsonl``
(with a hash of the ``env`` settings and seeds that made them) until the run saves step 0
(:meth:`Cloning.remove_checkpoint`), so a killed cloning goes on from its newest save without
playing the expert again. Continued cloning keeps its own state in
``run_dir/checkpoints_sft_continued`` and its metrics under ``sft_continued/``.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from pathlib import Path

import jax
from flax import nnx

from arlarena_jax.errors import ConfigError
from arlarena_jax.models.lora import join_trainable, split_trainable, trainable_part
from arlarena_jax.train import build
from arlarena_jax.train.checkpoint import Checkpointer, abstract_like, read_params
from arlarena_jax.train.config import Config
from arlarena_jax.train.config_io import config_to_dict
from arlarena_jax.train.demos import (
    Demonstration,
    demonstrations,
    read_demonstrations,
    write_demonstrations,
)
from arlarena_jax.train.held_out import held_out_path, read_records, write_records
from arlarena_jax.train.layout import checkpoints_dir
from arlarena_jax.train.process_shares import block
from arlarena_jax.train.run_state import HostState
from arlarena_jax.train.sft import CloneState, SFTJob, prepare_sft
from arlarena_jax.train.start import START_STEP
from arlarena_jax.train.stops import Stops, on_any_process

CLONING_CHECKPOINTS = "checkpoints_sft"  # cloning's state, until step 0 is saved
CONTINUED_CHECKPOINTS = "checkpoints_sft_continued"  # continued cloning's state, likewise
DEMONSTRATIONS = "demonstrations.jsonl"  # the expert turns cloning trains on, as long


def demonstrations_key(config: Config) -> str:
    """What makes the cloning's demonstrations (the ``env`` settings, the seeds), hashed: kept
    demonstrations are read back only under the same key."""
    made_by = {
        "env": config_to_dict(config.env),
        "seeds": [build.DEMO_SEED_BASE, config.sft.num_episodes],
    }
    text = json.dumps(made_by, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class Cloning:
    """The cloning of ``pieces.model`` (in place) for ``config``, in ``run_dir``; ``stops``: the
    run's phase and safe points; ``console``: print progress lines. ``continued``: the
    continued cloning (``sft.continue_steps`` steps from the policy the model holds, a fresh
    optimizer), with a checkpoint folder and metric names of its own."""

    def __init__(
        self,
        config: Config,
        run_dir: Path,
        pieces,
        stops: Stops,
        console: bool,
        *,
        continued: bool = False,
    ):
        self.config, self.run_dir, self.pieces = config, run_dir, pieces
        self.stops, self.console = stops, console
        self.continued = continued
        self.folder = CONTINUED_CHECKPOINTS if continued else CLONING_CHECKPOINTS
        self.prefix = "sft_continued" if continued else "sft"
        self.name = "continued cloning" if continued else "cloning"  # in lines and stop lines
        self._checkpointer: Checkpointer | None = None  # run_dir/checkpoints_sft, opened on use
        self._saved_at = time.monotonic()  # when cloning last saved (or began)
        self._loss = math.nan  # of the last cloning step

    def clone(self) -> dict[str, float]:
        """Clone on expert demonstrations of their own seed block, continuing a stopped or
        killed cloning from ``run_dir/checkpoints_sft``; its metrics (``sft/…``, at step 0)."""
        c, sft, p = self.config, self.config.sft, self.pieces
        demos = self.demonstrations()
        if not demos:
            raise ConfigError(
                f"config key 'sft.num_episodes': none of the {sft.num_episodes} expert episodes "
                f"succeeded within env.max_turns={c.env.max_turns}; nothing to clone"
            )
        start = time.perf_counter()
        job = prepare_sft(
            p.model,
            p.tokenizer,
            demos,
            batch_size=sft.batch_size,
            micro_batch_size=sft.micro_batch_size,
            optim=sft.optim,
            seed=sft.seed,
            enable_thinking=c.sampler.enable_thinking,
            mesh=p.mesh,
            **self.length(),
        )
        self.stops.phase = self.name
        state = self.start(job)
        if self.console:
            again = f", continuing after step {state.step}" if state.step else ""
            print(f"{self.name}: {job.total} steps on {len(demos)} expert turns{again}", flush=True)
        self.stops.check((state.step, job.total))
        self._saved_at = time.monotonic()  # seconds of cloning are counted from here
        final, history = job.run(
            state, log_fn=self._log, after_step=lambda s: self.after_step(job, s)
        )
        nnx.update(p.model, final.params)
        loss = history[-1]["loss"] if history else self._loss
        metrics = {
            f"{self.prefix}/final_loss": loss,
            f"{self.prefix}/examples": float(len(demos)),
            f"{self.prefix}/steps": float(job.total),
            f"timing/{self.prefix}": time.perf_counter() - start,
        }
        p.writer.scalars(0, metrics)
        if self.console:
            print(f"{self.name} done: loss {loss:.4f}", flush=True)
        return metrics

    def length(self) -> dict[str, float]:
        """``prepare_sft``'s length: ``sft.continue_steps`` steps when continued, else
        ``sft.steps`` (or ``sft.epochs`` when that is null)."""
        sft = self.config.sft
        if self.continued:
            return dict(steps=sft.continue_steps)
        return dict(steps=sft.steps) if sft.steps is not None else dict(epochs=sft.epochs)

    def demonstrations(self) -> list[Demonstration]:
        """The expert turns to clone: those an earlier start of this cloning kept in
        ``run_dir/demonstrations.jsonl`` (made by the same ``env`` settings and seeds), else
        played now and kept there (removed with the cloning checkpoint)."""
        c, sft = self.config, self.config.sft
        self.stops.phase = "demonstrations"
        path, key = self.run_dir / DEMONSTRATIONS, demonstrations_key(c)
        demos = read_demonstrations(path, key)
        (missing,) = on_any_process(demos is None)  # all play, or none
        if not missing:
            if self.console:
                print(f"demonstrations: {len(demos)} expert turns kept in {path}", flush=True)
            return demos
        seeds = range(build.DEMO_SEED_BASE, build.DEMO_SEED_BASE + sft.num_episodes)
        x = self.pieces.exchange  # each process plays its block of the seeds (process_shares)
        mine = block(len(seeds), x.index, x.count)
        part = demonstrations(
            c.env, [seeds[i] for i in mine], before_chunk=self.stops.check_between_chunks
        )
        demos = [d for piece in x.allgather("demonstrations", part) for d in piece]
        if demos and jax.process_index() == 0:
            write_demonstrations(path, demos, key)
        return demos

    def adopt(self, host: HostState, *, evaluation: bool = True) -> None:
        """Take the cloned policy of the shared start in ``sft.init_from`` (its checkpoint step 0,
        parameters only) instead of cloning, and into ``host`` its held-out evaluation, when it
        saved one and ``evaluation`` (not when cloning continues: that policy is another)."""
        p = self.pieces
        directory = Path(self.config.sft.init_from)
        _, params = nnx.split(p.model)
        target = abstract_like(trainable_part(params))  # LoRA: the start's adapters
        adopted, saved = read_params(checkpoints_dir(directory), START_STEP, target)
        nnx.update(p.model, adopted)
        if evaluation and saved.get("start_eval") is not None:
            host.sft_success, host.start_eval = saved["sft_success"], saved["start_eval"]
            split = self.config.trainer.eval_split
            episodes = held_out_path(directory, START_STEP, split)  # its per-episode outcomes
            if episodes.is_file() and jax.process_index() == 0:
                kept = held_out_path(self.run_dir, START_STEP, split)
                write_records(kept, read_records(episodes))
        p.writer.text(0, "start", f"cloned policy of the shared start {directory.absolute()}")
        if self.console:
            print(f"starting from the cloned policy of {directory}", flush=True)

    def start(self, job: SFTJob) -> CloneState:
        """The state cloning last saved in ``run_dir/checkpoints_sft``, else the start."""
        _, params = nnx.split(self.pieces.model)
        fresh = job.start(params)
        directory = self.run_dir / self.folder
        step = self.checkpointer().latest_step() if directory.is_dir() else None
        if step is None:
            return fresh
        trainable, frozen = split_trainable(fresh.params)  # LoRA: saved are the adapters
        target = abstract_like({"params": trainable, "opt_state": fresh.opt_state})
        tree, host = self.checkpointer().restore(target, step)
        made, wants = (host["total"], host["batches_per_epoch"]), (job.total, job.num_batches)
        if made != wants:
            raise ConfigError(
                f"config key 'sft.steps': the cloning checkpoint in {directory} is of {made[0]} "
                f"steps over {made[1]} batches per epoch, this config clones {wants[0]} steps "
                f"over {wants[1]}; remove {directory} to clone from the start"
            )
        self._loss = float(host.get("loss", math.nan))
        return CloneState(join_trainable(tree["params"], frozen), tree["opt_state"], step)

    def after_step(self, job: SFTJob, state: CloneState) -> None:
        """After a cloning step: save the cloning state once ``sft.save_every_s`` seconds of
        cloning have passed since the last save, and after the last step (so a hard kill loses
        at most that much); once stopped (but the last step), save it and stop."""
        every, last = self.config.sft.save_every_s, state.step >= job.total
        due = every > 0 and (last or time.monotonic() - self._saved_at >= every)
        guard = self.stops.guard
        requested = guard is not None and guard.requested
        requested, due = on_any_process(requested, due)  # every process saves, or none
        stop = requested and not last
        if stop or due:
            self.save(job, state, wait=stop)
        if stop:
            raise self.stops.stopped_at((state.step, job.total))

    def save(self, job: SFTJob, state: CloneState, *, wait: bool) -> None:
        """Save ``state`` in ``run_dir/checkpoints_sft`` (keeping only the newest), in the
        background unless ``wait``."""
        checkpointer = self.checkpointer()
        if state.step not in checkpointer.all_steps():
            epoch, batch = job.position(state.step)
            host = dict(
                step=state.step,
                total=job.total,
                batches_per_epoch=job.num_batches,
                epoch=epoch,  # the next batch: the stream's position
                batch=batch,
                loss=self._loss,  # of the last step done
            )
            tree = {"params": trainable_part(state.params), "opt_state": state.opt_state}
            checkpointer.save(state.step, tree, host, force=True)
        if wait:
            checkpointer.wait()
        self._saved_at = time.monotonic()

    def checkpointer(self) -> Checkpointer:
        if self._checkpointer is None:
            self._checkpointer = Checkpointer(self.run_dir / self.folder, keep=1)
        return self._checkpointer

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.close()
            self._checkpointer = None

    def remove_checkpoint(self) -> None:
        """Once the cloned policy is an RL checkpoint, the cloning checkpoint and the kept
        demonstrations go."""
        self.close()
        directory = self.run_dir / self.folder
        if jax.process_index() == 0:
            if directory.is_dir():
                shutil.rmtree(directory)
            (self.run_dir / DEMONSTRATIONS).unlink(missing_ok=True)

    def _log(self, step: int, metrics: dict[str, float]) -> None:
        self._loss = metrics["loss"]
        self.pieces.writer.scalars(step, {f"{self.prefix}/{k}": v for k, v in metrics.items()})
        if self.console and (step + 1) % 10 == 0:
            print(
                f"[{self.name} {step + 1}] loss {metrics['loss']:.4f} "
                f"grad {metrics['grad_norm']:.3f} lr {metrics['lr']:.2e}",
                flush=True,
            )
