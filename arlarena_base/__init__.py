"""What the library (``arlarena_jax``) and the environments (``envs``) share, so that neither
imports the other for it: the configuration errors (:mod:`arlarena_base.errors`) and the host's
memory reader (:mod:`arlarena_base.host_memory`). It imports nothing but the standard library."""
