"""Repository-level checks: dependencies, the docs site, the benches, launch scripts, the CLI's
errors, the compile cache."""
