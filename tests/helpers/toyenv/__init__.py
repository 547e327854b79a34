"""A toy environment in one folder, registered with one line (docs/architecture.md, "Adding an
environment"): read the number on a card and say it."""
