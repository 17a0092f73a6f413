"""The Environment room: one task, one sandbox, one conversation (reset / step / close, async first),
its tools, budgets, observation records and the judge call."""

from sparring.env.budgets import Budgets
from sparring.env.environment import Environment, Mark
from sparring.env.records import Observation, SampledTurn, StepResult

__all__ = ["Budgets", "Environment", "Mark", "Observation", "SampledTurn", "StepResult"]
