"""Policies the rollout calls: prompts (user-message contents) → generations
(docs/environments.md §1.2, §1.4).

* :class:`SamplerPolicy`: the LLM through the sampling engine. Each prompt becomes one chat with a
  single user message and no system message, rendered with ``add_generation_prompt=True``; the
  thinking switch is left to the template unless ``enable_thinking`` is given
  (docs/environments.md §1.4: Qwen3 thinks by default). Over-long prompts are a hard error
  (docs/environments.md §1.2, ``truncation='error'``).
* :class:`envs.text.ScriptedPolicy`: a Python function prompts → texts (tests, experts); no
  token ids. Both return :class:`envs.text.Generation`.

The rollout passes one sampler seed per prompt (``seeds``: the episode's turn seed,
:mod:`arlarena_jax.rollout.keys`), so a sample depends on its episode and turn, never on its
position in the call; a scripted policy ignores them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from arlarena_jax.sampler import Engine, Request, SamplingParams, generate
from envs.text import Context, Generation


class Policy(Protocol):
    """Maps N user-message contents to N generations, in order (docs/environments.md §1.2);
    ``seeds``: one sampler seed per prompt (a scripted policy ignores them)."""

    def __call__(
        self, prompts: list[str], *, training: bool, seeds: Sequence[int] | None = None
    ) -> list[Generation]: ...


class ContinuingPolicy(Policy, Protocol):
    """A policy that also continues conversations token by token (trajectory rows,
    docs/environments.md §1.8): ``continue_from`` generates after each context's prompt ids and
    right-side ids (``seeds``: one sampler seed per context); ``encode_text`` tokenizes an
    observation; ``decode`` turns ids into text."""

    def continue_from(
        self, contexts: Sequence[Context], *, training: bool, seeds: Sequence[int] | None = None
    ) -> list[Generation]: ...

    def encode_text(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


def chat_prompt_ids(tokenizer: Any, content: str, enable_thinking: bool | None = None) -> list[int]:
    """Token ids of one user message + the assistant header (docs/environments.md §1.4).

    ``enable_thinking=None`` passes no thinking argument to the template, as the original.
    """
    kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": content}],
        tokenize=False,
        add_generation_prompt=True,
        **kwargs,
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def call_seed(seed: int, call: int) -> int:
    """The ``call``-th 31-bit seed of the stream ``seed``: distinct per call, reproducible per
    run."""
    return int(np.random.SeedSequence([seed, call]).generate_state(1)[0] >> 1)


@dataclasses.dataclass
class SamplerPolicy:
    """The LLM policy over a sampling :class:`~arlarena_jax.sampler.Engine`
    (docs/environments.md §1.2).

    One request with ``n=1`` per prompt (the rollout already replicates environments per group).
    Prompt r draws from ``seeds[r]`` (its episode's turn seed, :mod:`arlarena_jax.rollout.keys`).
    The policy owns a seed stream, ``call_seed(seed, calls)``: :meth:`next_sample_seed` hands out
    its next seed and advances ``calls``, which the rollout does once per batch (the batch's
    sample seed), so a run is reproducible and resumes where its checkpointed counter says. A call
    without ``seeds`` (a direct call) draws one seed of the stream for itself and derives request
    r's key from it and r. ``train_sampling`` applies when ``training`` is True,
    ``eval_sampling`` otherwise
    (docs/environments.md §5.3: validation uses its own sampling settings). Texts are decoded with
    ``skip_special_tokens=True``; with stop strings they are cut after the stop string.
    """

    engine: Engine
    tokenizer: Any
    train_sampling: SamplingParams
    eval_sampling: SamplingParams
    max_new_tokens: int
    enable_thinking: bool | None = None
    stop_strings: Sequence[str] = ()
    seed: int = 0
    calls: int = 0  # seeds of the stream handed out so far (one per batch, checkpointed)

    def encode(self, prompts: Sequence[str]) -> list[list[int]]:
        """Chat-templated token ids; a prompt over ``max_prefill_length`` raises
        (docs/environments.md §1.2)."""
        ids = [chat_prompt_ids(self.tokenizer, p, self.enable_thinking) for p in prompts]
        limit = self.engine.max_prefill_length
        for i, prompt in enumerate(ids):
            if len(prompt) > limit:
                raise ValueError(
                    f"prompt {i} has {len(prompt)} tokens, over the engine's max_prefill_length "
                    f"{limit} (prompts are never truncated, docs/environments.md §1.2); raise "
                    "max_prefill_length or lower history_length"
                )
        return ids

    def next_sample_seed(self) -> int:
        """The stream's next seed, ``call_seed(seed, calls)``; advances ``calls``."""
        seed = call_seed(self.seed, self.calls)
        self.calls += 1
        return seed

    def __call__(
        self, prompts: list[str], *, training: bool, seeds: Sequence[int] | None = None
    ) -> list[Generation]:
        """Generate one response per prompt (see class doc)."""
        if not prompts:
            return []
        ids = self.encode(prompts)
        return self._generate(
            [Request(p, n=1, max_new_tokens=self.max_new_tokens) for p in ids], training, seeds
        )

    def continue_from(
        self, contexts: Sequence[Context], *, training: bool, seeds: Sequence[int] | None = None
    ) -> list[Generation]:
        """Continue each context after its prompt ids + right-side ids (the last
        ``max_prefill_length`` of them), with at most ``min(max_new_tokens, budget)`` new tokens.
        The generations' ``prompt_ids`` are the contexts' prompt ids."""
        if not contexts:
            return []
        limit = self.engine.max_prefill_length
        requests = [
            Request(
                [*c.prompt_ids, *c.ids][-limit:],
                n=1,
                max_new_tokens=max(1, min(self.max_new_tokens, c.budget)),
            )
            for c in contexts
        ]
        out = self._generate(requests, training, seeds)
        return [
            g._replace(prompt_ids=list(c.prompt_ids)) for g, c in zip(out, contexts, strict=True)
        ]

    def encode_text(self, text: str) -> list[int]:
        """``text``'s token ids, without special tokens (observations)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        """``ids`` as text, special tokens skipped (as the generations' texts)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def _generate(
        self, requests: list[Request], training: bool, seeds: Sequence[int] | None = None
    ) -> list[Generation]:
        """The requests' samples: request r seeded by ``seeds[r]``, or (no seeds) by the
        driver's derivation from the stream's next seed and r."""
        if seeds is None:
            seed = self.next_sample_seed()
        else:
            if len(seeds) != len(requests):
                raise ValueError(f"{len(seeds)} seeds for {len(requests)} prompts")
            seed = 0  # every request has its own seed
            requests = [
                dataclasses.replace(r, seed=int(s)) for r, s in zip(requests, seeds, strict=True)
            ]
        results = generate(
            self.engine,
            requests,
            tokenizer=self.tokenizer,
            sampling=self.train_sampling if training else self.eval_sampling,
            stop_strings=tuple(self.stop_strings),
            seed=seed,
        )
        return [
            Generation(
                c.text, list(c.prompt_ids), list(c.token_ids), list(c.log_probs), list(c.versions)
            )
            for (c,) in results
        ]
