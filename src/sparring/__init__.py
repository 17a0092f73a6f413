"""Sparring: agent reinforcement-learning post-training on real execution."""

__version__ = "0.1.0"
