"""Errors shared across layers, so environment code can raise them without importing the trainer."""

from __future__ import annotations


class ConfigError(ValueError):
    """An invalid configuration; the message is one line naming the offending key."""


class InvalidField(ValueError):
    """A settings value out of range, raised by a settings type's own check; ``field`` names it,
    so the config loader reports ``config key '<section>.<field>': <message>``."""

    def __init__(self, owner: str, field: str, message: str) -> None:
        super().__init__(f"{owner} {field} {message}")
        self.field, self.message = field, message
