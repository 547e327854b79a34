"""The configuration errors, re-exported from :mod:`arlarena_base.errors` (where the
environments import them from): the same classes, so ``except ConfigError`` here catches an
environment's."""

from __future__ import annotations

from arlarena_base.errors import ConfigError, InvalidField

__all__ = ["ConfigError", "InvalidField"]
