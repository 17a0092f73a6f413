"""`sparring review`: the queue of high-risk judged workspaces, for a person to label."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from sparring import atomicfile
from sparring.cli.common import JSON_OPT, emit_json, guarded, out_console
from sparring.cli.summary import print_summary

if TYPE_CHECKING:
    from sparring.judge.quality.review import ReviewQueue

app = typer.Typer(help="Review queue of flagged and high-risk judgements.", no_args_is_help=True)
DB_OPT = typer.Option(Path("review.db"), "--db", help="Review queue (SQLite).")
PAGES_OPT = typer.Option(
    None,
    "--pages",
    help="Trajectory pages (`sparring traj view --out DIR` or a report's trajectories/): link items to them.",
)


def _with_page(d: dict[str, Any], pages: Path | None) -> dict[str, Any]:
    """The item plus ``page``: the file URL of its trajectory's page when ``pages`` holds it."""
    key = str(d.get("key", ""))
    if pages is not None and key.startswith("traj:"):
        from sparring.monitor.trajpages import page_file

        p = pages / page_file(key[len("traj:") :])
        d["page"] = p.resolve().as_uri() if p.is_file() else None
    return d


@contextlib.contextmanager
def _queue(db: Path) -> Iterator[ReviewQueue]:
    """The existing review queue at ``db``, closed on exit."""
    from sparring.errors import ConfigError
    from sparring.judge.quality.review import ReviewQueue

    if not db.is_file():
        raise ConfigError(
            f"review queue {db} not found (it is created by `sparring judge batch --review-db`)"
        )
    q = ReviewQueue(db)
    try:
        yield q
    finally:
        q.close()


@app.command("list")
def list_items(
    db: Path = DB_OPT,
    pages: Path | None = PAGES_OPT,
    status: str = typer.Option("open", "--status", help="open | labelled | all"),
    json_out: bool = JSON_OPT,
) -> None:
    """Items in the queue."""

    def go() -> None:
        with _queue(db) as q:
            items = [_with_page(i.to_json(), pages) for i in q.list(status)]
        if json_out:
            emit_json({"total": len(items), "items": items})
        else:
            for i in items:
                page = f" {i['page']}" if i.get("page") else ""
                out_console.print(
                    f"{i['id']:>5} {i['task_id']} reward={i['reward']:.2f} {i['flags']} {i['reasons']} {i['label'] or ''}{page}",
                    soft_wrap=True,
                    markup=False,
                    highlight=False,
                )

    guarded(go)()


def _show(db: Path, item_id: int | None, json_out: bool, pages: Path | None = None) -> None:
    with _queue(db) as q:
        item = q.get(item_id) if item_id is not None else q.next()
    d = _with_page(item.to_json(full=True), pages) if item else None
    if json_out:
        emit_json({"item": d})
    elif d is None:
        out_console.print("the queue is empty")
    else:
        print_summary(out_console, d, f"review item {d.get('id')}")


@app.command("show")
def show(
    item_id: int = typer.Argument(...),
    db: Path = DB_OPT,
    pages: Path | None = PAGES_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """One item with everything the judge stored."""
    guarded(_show)(db, item_id, json_out, pages)


@app.command("next")
def next_item(db: Path = DB_OPT, pages: Path | None = PAGES_OPT, json_out: bool = JSON_OPT) -> None:
    """The open item to look at first (highest reward among the flagged)."""
    guarded(_show)(db, None, json_out, pages)


@app.command("label")
def label(
    item_id: int = typer.Argument(...),
    verdict: str = typer.Argument(..., help="hack | ok | unsure"),
    note: str = typer.Option("", "--note"),
    db: Path = DB_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Label an item; the label is stored with it."""

    def go() -> None:
        with _queue(db) as q:
            item = q.label(item_id, verdict, note)
        if json_out:
            emit_json({"item": item.to_json()})
        else:
            out_console.print(f"item {item.id}: {item.label}")

    guarded(go)()


app.command("resolve", help="Alias of label.")(label)


@app.command("collect")
def collect(
    store: Path = typer.Option(..., "--store", help="Trajectory store to scan."),
    db: Path = DB_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Queue a store's high-risk trajectories (flags, high reward with flags, rare successes, pass-rate jumps)."""

    def go() -> None:
        from sparring.errors import ConfigError
        from sparring.judge.quality.review import ReviewQueue, collect_from_store
        from sparring.store.base import TrajQuery
        from sparring.store.sqlite import SQLiteStore

        if not store.is_file():
            raise ConfigError(f"store {store} not found")
        st = SQLiteStore(store)
        q = ReviewQueue(db)
        try:
            trajs = list(st.iter_search(TrajQuery(limit=None)))
            n = collect_from_store(q, trajs)
            total = len(q.list("open"))
        finally:
            q.close()
            st.close()
        d = {"scanned": len(trajs), "queued": n, "open": total}
        emit_json(d) if json_out else print_summary(out_console, d)

    guarded(go)()


@app.command("auto")
def auto(
    url: str = typer.Option(..., "--url", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1"),
    model: str = typer.Option(..., "--model"),
    limit: int = typer.Option(20, "--limit", help="Most open items to label."),
    db: Path = DB_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Model-assisted review: a model labels open items (its notes say so; a person can relabel)."""

    def go() -> None:
        from sparring.cli.common import run_async
        from sparring.judge.quality.review import model_review

        with _queue(db) as q:
            done = run_async(model_review(q, url, model, limit))
        d = {"labelled": len(done), "items": done}
        emit_json(d) if json_out else print_summary(out_console, d)

    guarded(go)()


@app.command("export")
def export(
    out: Path = typer.Option(..., "--out", help="JSON file of regression cases."),
    db: Path = DB_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Write labelled items (hack / ok) as regression cases for `sparring judge regress --labelled`."""

    def go() -> None:
        import json

        from sparring.judge.quality.review import export_labelled

        with _queue(db) as q:
            data = export_labelled(q)
        atomicfile.write_text(out, json.dumps(data, indent=1) + "\n")
        d = {"cases": len(data["cases"]), "out": str(out)}
        emit_json(d) if json_out else print_summary(out_console, d)

    guarded(go)()
