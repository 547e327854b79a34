"""ALFWorld on the real TextWorld engine (docs/environments.md §4): data, game building, the
training-game generator, the environment and its expert."""
