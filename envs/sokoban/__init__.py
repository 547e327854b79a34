"""Sokoban (docs/environments.md §3): a JAX-native gymnax environment, text rendering, an optimal
BFS solver and a NumPy/Python reference of the same rules."""
