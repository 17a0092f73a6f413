"""Curriculum: pass-rate posteriors and task sampling."""

from sparring.curriculum.sampler import BetaCurriculum, TaskStats

__all__ = ["BetaCurriculum", "TaskStats"]
