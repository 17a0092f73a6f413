"""A command's result as a person reads it: a two-column table instead of a Python dict.

``--json`` prints the same object as JSON; without it, :func:`print_summary`
renders it. Nested objects are flattened into dotted keys (``statuses.ok``),
lists of scalars are joined, and lists of records show their count and the
first few in a compact one-line form.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

LIST_SHOWN = 5


def _scalar(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def one_line(v: Any) -> str:
    """One line for a value that sits inside a list (a record becomes ``k=v k=v``)."""
    if isinstance(v, dict):
        return " ".join(f"{k}={one_line(x)}" for k, x in v.items() if not isinstance(x, dict | list))
    if isinstance(v, list):
        return ", ".join(one_line(x) for x in v)
    return _scalar(v)


def summary_rows(obj: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """The (key, value) rows of ``obj``; pure, so tests check it without a console."""
    rows: list[tuple[str, str]] = []
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            rows.extend(summary_rows(v, key + ".") if v else [(key, "-")])
        elif isinstance(v, list) and v and any(isinstance(x, dict | list) for x in v):
            rows.append((key, f"{len(v)} item(s)"))
            rows.extend((f"{key}[{i}]", one_line(x)) for i, x in enumerate(v[:LIST_SHOWN]))
            if len(v) > LIST_SHOWN:
                rows.append((f"{key}[...]", f"{len(v) - LIST_SHOWN} more (--json prints them all)"))
        elif isinstance(v, list):
            rows.append((key, ", ".join(_scalar(x) for x in v) or "-"))
        else:
            rows.append((key, _scalar(v)))
    return rows


def print_summary(console: Console, obj: Any, title: str | None = None) -> None:
    """Print ``obj`` (a dict: a table; anything else: its text) for a person to read."""
    if not isinstance(obj, dict):
        console.print(one_line(obj) if isinstance(obj, list) else _scalar(obj), markup=False, highlight=False)
        return
    table = Table(title=title, show_header=False, box=None, pad_edge=False)
    table.add_column("key", style="bold")
    table.add_column("value", overflow="fold")
    for k, v in summary_rows(obj):
        table.add_row(Text(k), Text(v))  # text, not markup: values hold brackets
    console.print(table)
