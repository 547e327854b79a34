"""Tests of sweeps, the report, keep-results."""
