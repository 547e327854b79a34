"""Helpers the tests share: fake environments, spec vectors, row builders, reference models."""
