"""Curriculum: pass-rate posteriors, task sampling, and measured difficulty (``curriculum.difficulty``)."""

from sparring.curriculum.sampler import BetaCurriculum, TaskStats

__all__ = ["BetaCurriculum", "TaskStats"]
