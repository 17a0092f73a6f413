"""Tasks: spec, content digest, loading, registry, the hack catalogue, families (admission: sparring.admission)."""

from sparring.tasks.loader import Task, find_tasks, load_task, write_task
from sparring.tasks.spec import JudgeSpec, Limits, TaskSpec

__all__ = ["JudgeSpec", "Limits", "Task", "TaskSpec", "find_tasks", "load_task", "write_task"]
