"""`sparring traj ...`: search, show and export stored trajectories.

Every command opens the store read-only: a missing or foreign file is a
one-line error, never a new empty database.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from rich import box
from rich.table import Table
from rich.text import Text

from sparring.cli.common import JSON_OPT, emit_json, guarded, out_console
from sparring.errors import ConfigError
from sparring.store.base import TrajQuery
from sparring.store.export import export_jsonl, export_parquet
from sparring.store.sqlite import SQLiteStore
from sparring.trajectory import STATUSES, ToolStep, Trajectory

app = typer.Typer(help="Search, show and export stored trajectories.", no_args_is_help=True)

STORE_OPT = typer.Option(..., "--store", help="Trajectory store (SQLite file) to read.")
TASK_OPT = typer.Option(None, "--task", help="Only this task id.")
STATUS_OPT = typer.Option(None, "--status", help=f"Only this status ({', '.join(STATUSES)}).")
FAMILY_OPT = typer.Option(None, "--family", help="Only this task family.")
POLICY_OPT = typer.Option(None, "--policy", help="Only this policy spec (e.g. oracle).")
MIN_REWARD_OPT = typer.Option(None, "--min-reward", help="Reward >= X.")
MAX_REWARD_OPT = typer.Option(None, "--max-reward", help="Reward <= X.")
FLAG_OPT = typer.Option(None, "--flag", help="Only trajectories carrying this judge flag.")
TEXT_OPT = typer.Option(None, "--text", help="Substring of messages, tool-call arguments or tool outputs.")
RUN_OPT = typer.Option(None, "--run", help="Only this run id.")
JUDGE_OPT = typer.Option(None, "--judge-version", help="Only this judge version.")

SHOW_OUTPUT_CHARS = 1500  # per tool output in `traj show`; --json has everything


def _query(**filters: Any) -> TrajQuery:
    """A TrajQuery from CLI values; bad values become a one-line ConfigError."""
    if filters.get("status") is not None and filters["status"] not in STATUSES:
        raise ConfigError(f"unknown --status {filters['status']!r}: choose from {', '.join(STATUSES)}")
    if filters.get("limit") is not None and filters["limit"] < 0:
        raise ConfigError("--limit must be >= 0")
    if filters.get("offset", 0) < 0:
        raise ConfigError("--offset must be >= 0")
    try:
        return TrajQuery(**filters)
    except ValidationError as e:
        err = e.errors()[0]
        raise ConfigError(f"bad filter {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


@contextmanager
def _open(path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(path, readonly=True)
    try:
        yield store
    finally:
        store.close()


def _num(x: float | None) -> float | None:
    """JSON has no NaN/inf: report them as null rather than emit invalid JSON (None: unjudged)."""
    return x if x is not None and math.isfinite(x) else None


def _reward_text(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).isoformat(sep=" ", timespec="seconds")


def summary(t: Trajectory) -> dict[str, Any]:
    """The `traj search --json` item for one trajectory."""
    return {
        "id": t.id,
        "task_id": t.task_id,
        "status": t.status,
        "reward": _num(t.reward),
        "flags": list(t.flags),
        "attempts": t.attempts,
        "policy": t.policy,
        "family": t.family,
        "created_at": t.created_at,
    }


@app.command("search")
@guarded
def search(
    store: Path = STORE_OPT,
    task: str | None = TASK_OPT,
    status: str | None = STATUS_OPT,
    family: str | None = FAMILY_OPT,
    policy: str | None = POLICY_OPT,
    min_reward: float | None = MIN_REWARD_OPT,
    max_reward: float | None = MAX_REWARD_OPT,
    flag: str | None = FLAG_OPT,
    text: str | None = TEXT_OPT,
    run: str | None = RUN_OPT,
    judge_version: str | None = JUDGE_OPT,
    limit: int = typer.Option(50, "--limit", help="Show at most N (newest first)."),
    offset: int = typer.Option(0, "--offset", help="Skip the N newest matches."),
    json_out: bool = JSON_OPT,
) -> None:
    """Find trajectories by metadata and full text, newest first."""
    q = _query(
        task_id=task,
        status=status,
        family=family,
        policy=policy,
        min_reward=min_reward,
        max_reward=max_reward,
        flag=flag,
        text=text,
        run_id=run,
        judge_version=judge_version,
        limit=limit,
        offset=offset,
    )
    with _open(store) as s:
        total, page = s.search(q)
    if json_out:
        emit_json({"total": total, "trajectories": [summary(t) for t in page]})
        return
    table = Table(
        title=f"{len(page)} of {total} trajectories in {store}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for col in ("id", "task", "status", "reward", "flags", "att", "policy", "created"):
        numeric = col in ("reward", "att")
        fixed = col in ("status", "reward", "att", "created")
        table.add_column(
            col,
            justify="right" if numeric else "left",
            no_wrap=fixed,
            overflow="fold",
            min_width=None if fixed else 8,
        )
    for t in page:
        table.add_row(
            Text(t.id),
            Text(t.task_id),
            Text(t.status),
            _reward_text(t.reward),
            Text(", ".join(t.flags) or "-"),
            str(t.attempts),
            Text(t.policy),
            datetime.fromtimestamp(t.created_at).strftime("%m-%d %H:%M"),
        )
    out_console.print(table)


def _clip(s: str, n: int = SHOW_OUTPUT_CHARS) -> str:
    return s if len(s) <= n else f"{s[:n]}\n… [{len(s) - n} more chars; --json shows everything]"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else json.dumps(content)


def _header(t: Trajectory) -> list[Text]:
    comps = "  ".join(f"{k}={v:.3f}" for k, v in sorted(t.outcome_components.items())) or "-"
    process = (
        "  ".join(
            f"{k.removeprefix('process/')}={'TRIPPED' if k in t.flags else 'ok'}"
            for k in sorted(t.process_components)
        )
        or "-"
    )
    lines = [
        Text(f"trajectory {t.id}", style="bold"),
        Text(
            f"task      {t.task_id} v{t.task_version}  family {t.family or '-'}  digest {t.task_digest[:16]}"
        ),
        Text(
            f"policy    {t.policy} v{t.policy_version}  judge {t.judge_version or '-'}  run {t.run_id or '-'}"
            f"  group {t.group_id or '-'}#{t.sample_index}"
        ),
        Text(
            f"status    {t.status}  reward {_reward_text(t.reward)}  attempts {t.attempts}  submitted {t.submitted}"
            f"  created {_when(t.created_at)}"
        ),
        Text(f"outcome   {comps}"),
        Text(f"flags     {', '.join(t.outcome_flags) or '-'}", style="bold red" if t.outcome_flags else ""),
        Text(f"process   {process}", style="yellow" if t.process_flags else ""),
        Text(f"tests     passed {t.tests.passed}  failed {t.tests.failed}  errors {t.tests.errors}"),
    ]
    if t.parent_id is not None:
        lines.append(Text(f"branch    forked from {t.parent_id} after turn {t.branch_turn}"))
    if t.error:
        lines.append(Text(f"error     {t.error}", style="red"))
    for i, fault in enumerate(t.infra_errors, 1):
        lines.append(Text(f"retry {i}   {fault}", style="yellow"))
    if t.failing_tests:
        lines.append(Text(f"failing   {', '.join(t.failing_tests)}"))
    return lines


def _turns(t: Trajectory) -> list[Text]:
    """Messages in order; each tool call is followed by its step's full (clipped) output."""
    steps = {s.tool_call_id: s for s in t.steps}
    shown: set[str] = set()
    lines: list[Text] = []
    turn = 0
    for m in t.messages:
        role = str(m.get("role", "?"))
        text = _content_text(m.get("content"))
        if role == "assistant":
            turn += 1
            lines.append(Text(f"\n── turn {turn} ──", style="bold cyan"))
            if text.strip():
                lines.append(Text(text))
            for call in m.get("tool_calls") or ():
                fn = call.get("function", {}) if isinstance(call, dict) else {}
                cid = str(call.get("id", "")) if isinstance(call, dict) else ""
                lines.append(Text(f"→ {fn.get('name', '?')}({fn.get('arguments', '')})", style="yellow"))
                if cid in steps:
                    shown.add(cid)
                    lines.extend(_step_lines(steps[cid]))
        elif role == "tool":
            if str(m.get("tool_call_id", "")) not in shown:
                lines.append(Text("← " + _clip(text), style="dim"))
        else:
            lines.append(Text(f"[{role}] ", style="bold magenta") + Text(_clip(text, 600)))
    for s in t.steps:  # steps no message refers to (e.g. a failed call the model never saw)
        if s.tool_call_id not in shown:
            lines.append(Text(f"→ {s.name}({s.raw_arguments})", style="yellow"))
            lines.extend(_step_lines(s))
    return lines


def _step_lines(s: ToolStep) -> list[Text]:
    meta = [f"exit {s.exit_code}" if s.exit_code is not None else "", f"{s.duration_ms:.0f} ms"]
    if s.error:
        meta.append(f"error: {s.error}")
    out = [Text("← " + _clip(s.output), style="dim")] if s.output else []
    return [*out, Text("  (" + ", ".join(x for x in meta if x) + ")", style="dim")]


def _diff_lines(t: Trajectory) -> list[Text]:
    files = dict(t.diff.get("files") or {})
    deleted = list(t.diff.get("deleted") or [])
    lines = [
        Text(f"\n── final diff: {len(files)} file(s) written, {len(deleted)} deleted ──", style="bold cyan")
    ]
    for path, body in sorted(files.items()):
        if isinstance(body, dict) and "text" in body:
            lines.append(Text(f"  W {path} ({len(str(body['text']).splitlines())} lines)"))
        else:
            lines.append(Text(f"  W {path} (binary)"))
    lines.extend(Text(f"  D {p}") for p in deleted)
    return lines


@app.command("show")
@guarded
def show(
    traj_id: str = typer.Argument(
        ..., metavar="ID", help="Trajectory id or a unique prefix of it (from `traj search`)."
    ),
    store: Path = STORE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Render one trajectory: header, every turn with its tool calls and outputs, the final diff."""
    with _open(store) as s:
        t = s.get(s.resolve_id(traj_id))
    if json_out:
        doc = t.model_dump(mode="json")
        doc["reward"] = _num(t.reward)
        emit_json(doc)
        return
    for line in [*_header(t), *_turns(t), *_diff_lines(t)]:
        out_console.print(line, highlight=False, soft_wrap=True)


@app.command("export")
@guarded
def export(
    store: Path = STORE_OPT,
    out: Path = typer.Option(..., "--out", help="File to write (replaced atomically)."),
    fmt: str = typer.Option("jsonl", "--format", help="jsonl or parquet."),
    task: str | None = TASK_OPT,
    status: str | None = STATUS_OPT,
    family: str | None = FAMILY_OPT,
    policy: str | None = POLICY_OPT,
    min_reward: float | None = MIN_REWARD_OPT,
    max_reward: float | None = MAX_REWARD_OPT,
    flag: str | None = FLAG_OPT,
    text: str | None = TEXT_OPT,
    run: str | None = RUN_OPT,
    judge_version: str | None = JUDGE_OPT,
    limit: int | None = typer.Option(None, "--limit", help="Export at most N (newest first); default all."),
    tokens: bool = typer.Option(
        False,
        "--tokens",
        help="Exact token sequences (prompt/completion ids, logprobs, policy mask) instead of chat.",
    ),
    json_out: bool = JSON_OPT,
) -> None:
    """Write matching trajectories in the chat-messages format TRL / HF datasets read (or, with
    --tokens, as exact token sequences; mismatched turn boundaries are counted and reported)."""
    writers = {"jsonl": export_jsonl, "parquet": export_parquet}
    if fmt not in writers:
        raise ConfigError(f"unknown --format {fmt!r}: choose jsonl or parquet")
    q = _query(
        task_id=task,
        status=status,
        family=family,
        policy=policy,
        min_reward=min_reward,
        max_reward=max_reward,
        flag=flag,
        text=text,
        run_id=run,
        judge_version=judge_version,
        limit=limit,
    )
    if tokens:
        from sparring.store.token_export import export_tokens_jsonl, export_tokens_parquet

        token_writers = {"jsonl": export_tokens_jsonl, "parquet": export_tokens_parquet}
        with _open(store) as s:
            stats = token_writers[fmt](s, q, out)
        if json_out:
            emit_json({"written": stats.rows, "path": str(out), **stats.to_json()})
        else:
            out_console.print(Text(
                f"wrote {stats.rows} token sequences of {stats.trajectories} trajectories to {out} "
                f"({stats.sampled_tokens} sampled tokens, {stats.mismatches} mismatched turn boundaries)"
            ))  # fmt: skip
        return
    with _open(store) as s:
        n = writers[fmt](s, q, out)
    if json_out:
        emit_json({"written": n, "path": str(out)})
    else:
        out_console.print(Text(f"wrote {n} trajectories to {out}"))


@app.command("view")
@guarded
def view(
    store: Path = STORE_OPT,
    out: Path = typer.Option(Path("traj-pages"), "--out", help="Directory of the static pages (index.html)."),
    task: str | None = TASK_OPT,
    status: str | None = STATUS_OPT,
    family: str | None = FAMILY_OPT,
    policy: str | None = POLICY_OPT,
    min_reward: float | None = MIN_REWARD_OPT,
    max_reward: float | None = MAX_REWARD_OPT,
    flag: str | None = FLAG_OPT,
    text: str | None = TEXT_OPT,
    run: str | None = RUN_OPT,
    judge_version: str | None = JUDGE_OPT,
    limit: int = typer.Option(500, "--limit", help="Pages for at most N trajectories (newest first)."),
    json_out: bool = JSON_OPT,
) -> None:
    """Write static pages (open offline): a searchable index and one page per matching trajectory."""
    from sparring.cli.pages import decoder, load_trajectories
    from sparring.monitor.trajpages import write_site

    q = _query(
        task_id=task, status=status, family=family, policy=policy, min_reward=min_reward,
        max_reward=max_reward, flag=flag, text=text, run_id=run, judge_version=judge_version, limit=limit,
    )  # fmt: skip
    if out.exists() and not out.is_dir():
        from sparring.errors import ConfigError

        raise ConfigError(
            f"--out {out} is a file; traj view writes a directory of pages: give a directory path"
        )
    with _open(store):  # a missing or foreign store is a one-line error, as in every traj command
        pass
    trajs = load_trajectories(store, [q])
    res = write_site(trajs, out, f"Trajectories in {store.name}", decode=decoder(trajs))
    if json_out:
        emit_json(res)
    else:
        out_console.print(Text(f"wrote {len(res['pages'])} trajectory pages: {res['html']}"), soft_wrap=True)
