"""arlarena-jax: ARLArena's components and SAMPO for training LLM agents with RL, in JAX."""

__version__ = "0.1.0"
