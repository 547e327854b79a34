"""ALFWorld on the real TextWorld engine (spec environments §3): data, game building, the
training-game generator, the environment and its expert."""
