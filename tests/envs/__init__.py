"""Tests of the environments (Sokoban, ALFWorld, WebShop, math, TextWorld), their registry, pool,
prompts and projection."""
