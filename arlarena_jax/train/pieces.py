"""What a run opens, each piece built once, the costly ones on first use (``arlarena eval``
opens no writer and no training environments), and closed with it in reverse order."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arlarena_jax.rollout.loop import collect
from arlarena_jax.rollout.policy import SamplerPolicy
from arlarena_jax.train import build
from arlarena_jax.train.fingerprint import check_same_start
from arlarena_jax.train.kept_tokenizer import run_tokenizer
from arlarena_jax.train.metrics import MetricsWriter, TimedEnvBatch, Timer
from arlarena_jax.train.process_shares import block, check_group_shares
from arlarena_jax.train.processes import Exchange
from arlarena_jax.train.resolution import Resolved


class Pieces:
    """The model and its formats (built now), the writer, the sampler, the on-device rollout
    and the environments (built on first use). ``closing``: where what is opened is closed;
    ``first_calls``: the policy's call counter when the sampler is built."""

    def __init__(
        self, run: Resolved, run_dir: Path, closing: contextlib.ExitStack, first_calls: Callable
    ) -> None:
        self.resolved, self.run_dir, self.closing = run, run_dir, closing
        self.config = config = run.config
        self.first_calls = first_calls
        self.exchange = Exchange()  # one process: exchanges nothing
        check_group_shares(config.env.train_batch_size, self.exchange.count)
        check_same_start(self.exchange, run)
        self.mesh = build.build_mesh(config)
        self.tokenizer = self._tokenizer()
        self.model = build.build_model(config, self.tokenizer, self.mesh, config.trainer.seed)
        self.objective = build.build_objective(run)
        self.task_format = build.task_format(run)
        self.rows = build.row_layout(run)  # turn rows (None) or trajectory rows
        self.timer = Timer()  # the RL step's timing splits (the training environments' too)
        self.sampler: tuple[Any, SamplerPolicy] | None = None  # (engine, policy), once built
        self._writer: MetricsWriter | None = None
        self._envs: dict[str, Any] = {}
        self._device_rollout: Any = None

    def _tokenizer(self) -> Any:
        """The run's tokenizer, kept in run_dir/tokenizer when built: process 0 keeps it, the
        others read the kept one once it is there (one writer to the shared directory)."""
        kept = self.exchange.first_then_all("tokenizer kept", lambda: run_tokenizer(self.resolved))
        return run_tokenizer(self.resolved) if kept is None else kept

    @property
    def writer(self) -> MetricsWriter:
        if self._writer is None:
            first = self.exchange.index == 0  # one writer of the run's event files
            writer = MetricsWriter(
                self.run_dir / "tensorboard" if first else None,
                eval_split=self.config.trainer.eval_split,
            )
            self._writer = self.closing.enter_context(contextlib.closing(writer))
        return self._writer

    @property
    def writer_opened(self) -> MetricsWriter | None:
        """The writer if it was opened, else None."""
        return self._writer

    @property
    def engine(self):
        return self._sampler_pair()[0]

    @property
    def policy(self) -> SamplerPolicy:
        return self._sampler_pair()[1]

    def _sampler_pair(self) -> tuple[Any, SamplerPolicy]:
        if self.sampler is None:
            self.sampler = build.build_policy(self.config, self.model, self.tokenizer, self.mesh)
            self.sampler[1].calls = self.first_calls()
        return self.sampler

    @property
    def collector(self):
        """What plays a batch of episodes: the host loop (``collect``), or under
        ``env.device_rollout`` the on-device rollout's ``collect`` (built once)."""
        if not self.config.env.device_rollout:
            return collect
        if self._device_rollout is None:
            self._device_rollout = build.build_device_rollout(self.config, self.policy)
        return self._device_rollout.collect

    def envs(self, purpose: str):
        """The training (``"train"``) or evaluation (``"eval"``: ``trainer.eval_split``'s)
        environments, opened once and closed with the run."""
        if purpose not in self._envs:
            c = self.config
            training = purpose == "train"
            x = self.exchange  # each process opens its share (process_shares)
            n = (
                c.env.train_batch_size // x.count * c.env.group_size
                if training
                else min(c.env.eval_batch_size, len(block(c.trainer.eval_episodes, 0, x.count)))
            )
            split = "train" if training else c.trainer.eval_split
            batch = self.closing.enter_context(
                contextlib.closing(build.make_envs(self.resolved, n, split))
            )
            self._envs[purpose] = TimedEnvBatch(batch, self.timer) if training else batch
        return self._envs[purpose]
