"""`sparring image`: pull, import, build and manage the container images sandboxes run on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from sparring.cli.common import JSON_OPT, emit_json, err_console, guarded

app = typer.Typer(
    help="Container images: the roots sandboxes run on (store: $SPARRING_IMAGE_ROOT).", no_args_is_help=True
)


def _store() -> Any:
    from sparring.images.store import ImageStore

    return ImageStore()


def _summary(rec: Any, refs: list[str]) -> dict[str, object]:
    return {
        "digest": rec.digest,
        "refs": refs,
        "layers": len(rec.layers),
        "size_bytes": rec.size_bytes,
        "source": rec.source,
    }


@app.command("pull")
@guarded
def pull(
    ref: str = typer.Argument(..., help="REGISTRY/NAME[:TAG] or ...@sha256:DIGEST"),
    insecure: bool = typer.Option(False, "--insecure", help="Plain HTTP (only to a loopback registry)."),
    json_out: bool = JSON_OPT,
) -> None:
    """Pull an image by tag or digest, verify every blob and unpack it (ready for `sandbox exec --image`)."""
    from sparring.cli.progress import Bars
    from sparring.images.registry import pull as do_pull

    store = _store()
    with Bars() as bars:
        started: set[str] = set()
        last: dict[str, int] = {}

        def progress(what: str, done: int, total: int) -> None:
            if what not in started:
                started.add(what)
                bars.start(what, max(total, 1), f"pull {what}")
            bars.advance(what, done - last.get(what, 0))
            last[what] = done

        res = do_pull(store, ref, insecure=insecure, progress=progress, status=bars.log)
        for what in started:
            bars.finish(what)
    out = {"ref": res.ref, "digest": res.digest, "layers": res.layers, "size_bytes": res.size_bytes}
    if json_out:
        emit_json(out)
    else:
        err_console.print(f"pulled {res.ref}: {res.digest} ({res.layers} layers, {res.size_bytes} bytes)")


@app.command("import")
@guarded
def import_cmd(
    archive: Path = typer.Argument(
        ..., help="A docker save tar, an oci-archive tar or an OCI layout directory."
    ),
    tag: str | None = typer.Option(None, "--tag", help="Name the image (e.g. mytask/env:1)."),
    json_out: bool = JSON_OPT,
) -> None:
    """Import an image from an archive or layout directory and unpack it."""
    from sparring.images.archive import import_archive

    store = _store()
    rec = import_archive(store, archive, tag=tag, status=lambda m: err_console.print(m, highlight=False))
    out = {"ref": tag, **_summary(rec, store.refs_of(rec.digest))}
    if json_out:
        emit_json(out)
    else:
        err_console.print(f"imported {archive}: {rec.digest}")


@app.command("build")
@guarded
def build(
    context: Path = typer.Argument(..., help="Build context directory."),
    file: Path | None = typer.Option(None, "-f", "--file", help="Dockerfile (default CONTEXT/Dockerfile)."),
    tag: str = typer.Option(..., "--tag", "-t", help="Name the built image."),
    json_out: bool = JSON_OPT,
) -> None:
    """Build a Dockerfile with buildah (RUN steps really run) and import the result."""
    from sparring.images.builder import build as do_build

    store = _store()
    rec = do_build(store, context, tag, file)
    out = {"ref": tag, **_summary(rec, store.refs_of(rec.digest))}
    if json_out:
        emit_json(out)
    else:
        err_console.print(f"built {tag}: {rec.digest}")


@app.command("list")
@guarded
def list_cmd(json_out: bool = JSON_OPT) -> None:
    """The images in the store."""
    store = _store()
    images = [_summary(r, store.refs_of(r.digest)) for r in store.records()]
    if json_out:
        emit_json({"root": str(store.root), "images": images})
        return
    from rich.table import Table

    t = Table("digest", "refs", "layers", "MB")
    for im in images:
        t.add_row(
            str(im["digest"])[:19],
            ", ".join(str(r) for r in im["refs"]) or "-",  # type: ignore[attr-defined]
            str(im["layers"]),
            f"{int(str(im['size_bytes'])) / 1e6:.1f}",
        )
    err_console.print(t)


@app.command("inspect")
@guarded
def inspect(
    ref: str = typer.Argument(..., help="A reference, tag or digest (prefix) in the store."),
    json_out: bool = JSON_OPT,
) -> None:
    """Everything the store knows of an image: layers, config Env and WorkingDir, its root."""
    store = _store()
    rec = store.require(ref)
    out = {
        **rec.model_dump(mode="json"),
        "refs": store.refs_of(rec.digest),
        "rootfs": str(store.root_dir(rec.digest)),
    }
    if json_out:
        emit_json(out)
    else:
        import json

        err_console.print_json(json.dumps(out))


@app.command("rm")
@guarded
def rm(
    refs: list[str] = typer.Argument(..., help="References, tags or digests."), json_out: bool = JSON_OPT
) -> None:
    """Forget references; an image no reference names any more is removed (its blobs at the next gc)."""
    store = _store()
    removed: list[str] = []
    for r in refs:
        removed += store.remove(r)
    if json_out:
        emit_json({"removed": removed})
    else:
        err_console.print(f"removed {len(removed)} image(s)")


@app.command("gc")
@guarded
def gc(json_out: bool = JSON_OPT) -> None:
    """Remove blobs, layers and roots no image uses, and what interrupted pulls left."""
    out = _store().gc()
    if json_out:
        emit_json(out)
    else:
        err_console.print(", ".join(f"{k}: {v}" for k, v in out.items()))
