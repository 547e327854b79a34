"""Per-environment interaction history and its prompt window (docs/environments.md §1.4).

One record ``{text_obs, action}`` is appended per env step, for every environment (finished ones
included, as the original). ``text_obs`` is the raw observation the action was chosen from (the
one *before* the action); ``action`` is the projected action string (the task format's
``memory_action``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from envs.text import HistoryWindow


class Record(TypedDict):
    text_obs: str
    action: str


def format_record(step: int, record: Record) -> str:
    """``[Observation k: '<obs>', Action k: '<action>']`` with k the 1-based step
    (docs/environments.md §1.4)."""
    return f"[Observation {step}: '{record['text_obs']}', Action {step}: '{record['action']}']"


class SimpleMemory:
    """The history of N environments: a list of records per environment
    (docs/environments.md §1.4)."""

    def __init__(self, num_envs: int):
        self.records: list[list[Record]] = [[] for _ in range(num_envs)]

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, env: int) -> list[Record]:
        return self.records[env]

    def store(self, text_obs: Sequence[str], actions: Sequence[str]) -> None:
        """Append one record per environment
        (docs/environments.md §1.4: for all N envs, every step)."""
        if len(text_obs) != len(self.records) or len(actions) != len(self.records):
            raise ValueError(
                f"memory of {len(self.records)} envs got {len(text_obs)} observations and "
                f"{len(actions)} actions"
            )
        for env, (obs, action) in enumerate(zip(text_obs, actions, strict=True)):
            self.records[env].append(Record(text_obs=obs, action=action))

    def step_count(self, env: int) -> int:
        """Actions taken so far by ``env`` (the prompt's step count)."""
        return len(self.records[env])

    def window(self, env: int, history_length: int = 2) -> HistoryWindow:
        """The last ≤``history_length`` records of ``env``, formatted
        (docs/environments.md §1.4)."""
        records = self.records[env]
        shown = records[-history_length:] if history_length > 0 else []
        first = len(records) - len(shown) + 1
        lines = [format_record(first + j, rec) for j, rec in enumerate(shown)]
        return HistoryWindow("\n".join(lines), len(shown), len(records))

    def fetch(self, history_length: int = 2) -> tuple[list[str], list[int]]:
        """Per environment the formatted window and its valid_len (the original's ``fetch``)."""
        windows = [self.window(env, history_length) for env in range(len(self.records))]
        return [w.history for w in windows], [w.history_length for w in windows]
