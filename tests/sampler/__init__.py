"""Tests of the sampling engine and its driver."""
