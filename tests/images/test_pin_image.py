"""`sparring tasks pin` pins a task's [environment] image: a tag becomes REF@sha256:... (the digest the
tag names in the image store), a digest stays, and a tag the store lacks is a one-line error."""

from __future__ import annotations

import tarfile
import tomllib

import pytest
from image_support import entry, tar_bytes, write_layout

from sparring.errors import TaskError
from sparring.images.archive import import_archive
from sparring.images.store import ImageStore
from sparring.tasks.pin import pin_task
from tests_support import make_clamp_task


def _with_image(task_dir, image: str) -> None:
    f = task_dir / "task.toml"
    text = f.read_text()
    if "[environment]" not in text:
        text += "\n[environment]\n"
    text = text.replace("[environment]\n", f'[environment]\nimage = "{image}"  # the task\'s system\n', 1)
    f.write_text(text)


def test_a_tag_is_pinned_to_its_digest_and_a_digest_stays(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARRING_IMAGE_ROOT", str(tmp_path / "images"))
    write_layout(
        tmp_path / "layout", [tar_bytes([entry("etc/", tarfile.DIRTYPE), entry("etc/motd", data=b"m")])]
    )
    rec = import_archive(ImageStore(), tmp_path / "layout", tag="sparring-test/env:1")
    task = make_clamp_task(tmp_path / "task")
    pin_task(task.path)  # the workspace pin first: what follows changes only the image
    _with_image(task.path, "sparring-test/env:1")

    pinned = pin_task(task.path)
    assert pinned.changed and pinned.image == f"sparring-test/env:1@{rec.digest}"
    assert pinned.image_previous == "sparring-test/env:1"
    text = (task.path / "task.toml").read_text()
    assert tomllib.loads(text)["environment"]["image"] == pinned.image
    assert "# the task's system" in text  # the line was edited in place, the comment kept
    again = pin_task(task.path)
    assert not again.changed and again.to_json()["image"] == pinned.image


def test_a_tag_missing_from_the_store_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARRING_IMAGE_ROOT", str(tmp_path / "images"))
    task = make_clamp_task(tmp_path / "task")
    _with_image(task.path, "sparring-test/absent:1")
    before = (task.path / "task.toml").read_text()
    with pytest.raises(TaskError, match="sparring image pull sparring-test/absent:1") as e:
        pin_task(task.path)
    assert "\n" not in str(e.value)
    assert (task.path / "task.toml").read_text() == before  # nothing half-written
