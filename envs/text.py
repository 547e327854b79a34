"""The text-agent building blocks every environment's prompt format uses
(docs/environments.md §1.4).

The chat is one user message whose content a :class:`TaskFormat` builds: a template filled with
the task, the last-k history window (:class:`HistoryWindow`, kept by the rollout's memory) and
the raw current observation. A format bundles the plain functions one environment needs (task
extraction, prompt, projection, memory word); each environment defines its formats in
``envs/<name>/prompts.py`` and lists them in its :class:`envs.registry.EnvSpec`.

A policy answers N prompts with N :class:`Generation`, given one sampler seed per prompt
(``seeds``, from the episode's identity: ``arlarena_jax.rollout.keys``; a scripted policy ignores
them); :class:`ScriptedPolicy` makes one from a plain function (tests and experts). The template
fragments shared by the paper's formats (``THINK_THEN_ACT``, ``HISTORY``) are here too; every
template starts with a newline, as the original strings do.

Observation conventions (``envs.base.Observation``): ``text`` is the raw observation (the anchor;
WebShop: the quote-formatted page; Sokoban: the grid). ``admissible`` holds ALFWorld's
commands and WebShop's available actions as action strings (``search[<your query>]``,
``click[<clickable>]``); Sokoban needs none. ``task`` is the instruction where the env gives it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from envs.base import Observation
from envs.projection import Projection

THINK_THEN_ACT = (
    "This reasoning MUST be enclosed within <think> </think> tags.\n"
    "When your reasoning is complete, pick an admissible action for the current step and "
    "write it within <action> </action> tags.\n"
)
HISTORY = (
    "Before this step you have taken {step_count} step(s). Here are your latest "
    "{history_length} observations and the actions you chose after each: {action_history}\n"
)


class HistoryWindow(NamedTuple):
    """What a with-history prompt shows of one environment's past (docs/environments.md §1.4)."""

    history: str  # the last ≤k records, one ``[Observation k: …, Action k: …]`` line each
    history_length: int  # valid_len = number of records shown
    step_count: int  # actions taken so far = number of records

    @property
    def current_step(self) -> int:
        """The 1-based number of the step being decided now."""
        return self.step_count + 1


def history_fields(window: HistoryWindow) -> dict[str, object]:
    """The ``HISTORY`` template's fields plus ``current_step``."""
    return dict(
        step_count=window.step_count,
        history_length=window.history_length,
        action_history=window.history,
        current_step=window.current_step,
    )


def quoted_commands(commands: Sequence[str]) -> str:
    """Single-quoted commands joined by ``"\\n "`` (the admissible-actions block)."""
    return "\n ".join(f"'{c}'" for c in commands)


def admissible_prompt(
    templates: tuple[str, str],
    obs: Observation,
    task: str,
    window: HistoryWindow | None,
    actions: str,
) -> str:
    """Fill ``(with_history, no_history)`` templates of the ALFWorld shape: the observation, the
    ``actions`` block and, with a ``window``, the task and the history fields."""
    with_history, no_history = templates
    if window is None:
        return no_history.format(current_observation=obs.text, admissible_actions=actions)
    return with_history.format(
        task_description=task,
        current_observation=obs.text,
        admissible_actions=actions,
        **history_fields(window),
    )


def no_task(obs: Observation) -> str:
    """For an environment without a task description (its goal is in the template)."""
    return ""


def text_memory_action(projection: Projection, raw_text: str) -> str:
    """The projected action string (already the raw 30-char tail when unparsable)."""
    return str(projection.action)


def no_episode_metrics(info: Mapping[str, Any], won: bool) -> dict[str, float]:
    """An environment with no metrics beyond ``success_rate``."""
    return {}


class TaskFormat(NamedTuple):
    """The plain functions that turn one environment's observations into prompts and responses
    into actions (docs/environments.md §1.4–§1.5). ``build_prompt(obs, task, window)`` uses
    ``NO_HIS`` when ``window`` is None."""

    name: str
    extract_task: Callable[[Observation], str]
    build_prompt: Callable[[Observation, str, HistoryWindow | None], str]
    project: Callable[[str, Observation], Projection]
    memory_action: Callable[[Projection, str], str]
    data_source: str = "text"
    # (final info, won) -> the environment's extra per-episode metrics (averaged over episodes)
    episode_metrics: Callable[[Mapping[str, Any], bool], dict[str, float]] = no_episode_metrics
    # trajectory rows (docs/environments.md §1.8): the part of a response that is kept (None: all)
    cut_response: Callable[[str], str] | None = None
    # trajectory rows: the text an observation appends to the conversation (None: the format
    # cannot continue a conversation, turn rows only)
    continuation: Callable[[Observation], str] | None = None


class Context(NamedTuple):
    """A conversation to continue (trajectory rows, docs/environments.md §1.8): the user message
    (``prompt``, chat-templated as ``prompt_ids``), then the assistant side so far: responses and
    observations as ``text`` and, for an LLM policy, ``ids``. ``budget``: at most this many new
    tokens."""

    prompt: str
    prompt_ids: Sequence[int]
    text: str
    ids: Sequence[int]
    budget: int


class Generation(NamedTuple):
    """One response: its text and, for an LLM policy, its token ids and behaviour log-probs."""

    text: str
    prompt_ids: Sequence[int] = ()  # the chat-templated prompt
    response_ids: Sequence[int] = ()
    log_probs: Sequence[float] = ()  # one per response token
    versions: Sequence[int] = ()  # policy version of each response token (asynchronous RL)


@dataclasses.dataclass
class ScriptedPolicy:
    """A policy from a function ``prompts -> texts`` (tests, experts); ids and log-probs empty."""

    fn: Callable[[list[str]], Sequence[str]]

    def __call__(
        self, prompts: list[str], *, training: bool, seeds: Sequence[int] | None = None
    ) -> list[Generation]:
        """The function's texts, one per prompt (``seeds`` ignored)."""
        texts = list(self.fn(list(prompts)))
        if len(texts) != len(prompts):
            raise ValueError(f"scripted policy returned {len(texts)} texts for {len(prompts)}")
        return [Generation(str(t)) for t in texts]

    def continue_from(
        self, contexts: Sequence[Context], *, training: bool, seeds: Sequence[int] | None = None
    ) -> list[Generation]:
        """The function's texts for ``prompt + text`` of each context (no ids; ``seeds``
        ignored)."""
        return self([c.prompt + c.text for c in contexts], training=training)

    def encode_text(self, text: str) -> list[int]:
        """A scripted policy has no tokens."""
        return []

    def decode(self, ids: Sequence[int]) -> str:
        return ""


# A policy as the rollout calls it: ``policy(prompts, training=..., seeds=...)`` -> one Generation
# each (``seeds``: one sampler seed per prompt, which a scripted expert ignores).
ExpertPolicy = Callable[..., list[Generation]]


def _same_task(seed: int) -> int:
    return seed


@dataclasses.dataclass(frozen=True)
class Expert:
    """How a scripted expert plays demonstrations (``arlarena_jax.train.demos`` runs it through
    the rollout, one episode per task; an environment's spec builds it, ``EnvSpec.expert``).

    ``policy_for(seeds)`` is the policy for one chunk of episodes, environment ``i`` playing
    ``seeds[i]``. ``task_of(seed)`` is a seed that plays the same task: episodes of equal tasks
    are identical (a deterministic expert), so each task is played once. ``every_turn``: the
    policy needs every environment's prompt every turn (the rollout generates for finished ones
    too). ``batch_size``: environments played at once."""

    policy_for: Callable[[list[int]], ExpertPolicy]
    task_of: Callable[[int], int] = _same_task
    every_turn: bool = False
    batch_size: int = 64


def plan_reply(action: str, *, think: bool = True) -> str:
    """``<think>rationale</think><action>action</action>`` for a scripted expert following a plan;
    ``think=False`` leaves the reasoning empty (the short reply of tiny CPU policies)."""
    thought = f"Following my plan, the next step is: {action}." if think else ""
    return f"<think>{thought}</think><action>{action}</action>"


class ReplayPolicy:
    """A scripted policy replaying one planned action list per environment: at turn ``t``,
    environment ``i`` answers ``plan_reply(plans[i][t])`` (``filler`` past the plan's end).

    It is called once per turn with every environment's prompt in order, so the rollout must
    generate for finished environments too (``Expert.every_turn``)."""

    def __init__(self, plans: Sequence[Sequence[str]], *, filler: str, think: bool = True) -> None:
        self.plans = [tuple(p) for p in plans]
        self.filler = filler
        self.think = think
        self.turn = 0

    def __call__(
        self, prompts: list[str], *, training: bool, seeds: Sequence[int] | None = None
    ) -> list[Generation]:
        if len(prompts) != len(self.plans):
            raise ValueError(
                f"{type(self).__name__} holds {len(self.plans)} plans but got {len(prompts)} "
                "prompts: run the rollout with skip_done=False"
            )
        t, self.turn = self.turn, self.turn + 1
        return [
            Generation(plan_reply(p[t] if t < len(p) else self.filler, think=self.think))
            for p in self.plans
        ]
