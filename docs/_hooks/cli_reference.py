"""mkdocs hook: the CLI reference page is generated from the commands themselves.

A page holding the marker ``<!-- cli-reference -->`` gets, in its place, the ``--help`` of
``sparring`` and of every group and command under it, as the installed code prints it, so the
reference cannot drift from the code.
"""

from __future__ import annotations

import os
from typing import Any

MARKER = "<!-- cli-reference -->"


def _walk(cmd: Any, path: list[str]) -> list[list[str]]:
    """Every command path under ``cmd`` (groups first, then their commands), sorted by name."""
    out = [path]
    for name in sorted(getattr(cmd, "commands", {}) or {}):
        sub = cmd.commands[name]
        if getattr(sub, "hidden", False):
            continue
        out += _walk(sub, [*path, name])
    return out


def render() -> str:
    import typer.main
    from typer.testing import CliRunner

    from sparring.cli.main import app

    root = typer.main.get_command(app)
    runner = CliRunner()
    env = {"COLUMNS": "100", "TERM": "dumb", "NO_COLOR": "1", "_TYPER_FORCE_DISABLE_TERMINAL": "1"}
    parts = []
    for path in _walk(root, []):
        res = runner.invoke(app, [*path, "--help"], env={**os.environ, **env}, color=False)
        name = " ".join(["sparring", *path])
        level = "##" if len(path) <= 1 else "###"
        parts.append(f"{level} `{name}`\n\n```text\n{res.output.rstrip()}\n```\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())
