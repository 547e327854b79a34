"""The arena: sweeps over methods, seeds and hyper-parameters from shared cloned starts, and
their report."""
