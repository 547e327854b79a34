"""Environments for agentic RL: Sokoban (JAX-native), ALFWorld (TextWorld), the host-side worker
pool, and the registry the trainer reads them from (:mod:`envs.registry`)."""
