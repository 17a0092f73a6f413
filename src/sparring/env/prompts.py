"""The opening of every conversation and the hints the Environment answers with."""

from __future__ import annotations

from typing import Any

from sparring.tasks.loader import Task

SYSTEM_PROMPT = (
    "You are a careful software engineer. You work in /workspace through the tools you are given. "
    "Call one tool at a time. When the task is done, call submit()."
)
NO_TOOL_CALL = "No tool call was found in your reply. Call one of the tools, or submit() when you are done."


def initial_messages(task: Task) -> list[dict[str, Any]]:
    """System prompt and the task's instruction with its success criteria."""
    s = task.spec
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"{s.instruction}\n\nSuccess criteria: {s.success_criteria}"},
    ]


def unparsed_hint(errors: list[Any], some_ran: bool) -> str:
    """What the model is told when (some of) its tool calls could not be parsed."""
    head = "Some tool calls could not be parsed: " if some_ran else "Your tool call could not be parsed: "
    return head + "; ".join(map(str, errors))[:500]
