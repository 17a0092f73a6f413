"""`sparring sandbox tune`: the cgroup favordynmods host setting."""

from __future__ import annotations

import json
import os

import pytest

from sparring.sandbox.isolation import mounts, tuning

SYSTEMD = (
    "30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n"
)
HYBRID = (
    "31 25 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "40 25 0:35 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,favordynmods\n"
)


def test_mountinfo_parsing_finds_the_v2_mount_and_its_options():
    m = tuning.cgroup2_mount(SYSTEMD)
    assert m is not None and str(m.path) == "/sys/fs/cgroup" and not m.favordynmods
    h = tuning.cgroup2_mount(HYBRID)
    assert h is not None and str(h.path) == "/sys/fs/cgroup/unified" and h.favordynmods
    assert tuning.cgroup2_mount("31 25 0:27 / /x rw - cgroup cgroup rw,memory\n") is None


def test_remount_keeps_every_other_option():
    m = tuning.cgroup2_mount(SYSTEMD)
    assert m is not None
    flags, data = tuning.remount_args(m)
    assert flags == mounts.MS_REMOUNT | mounts.MS_NOSUID | mounts.MS_NODEV | 8 | tuning.MS_RELATIME
    assert data == "nsdelegate,memory_recursiveprot,favordynmods"


@pytest.mark.skipif(os.geteuid() != 0 or tuning.cgroup2_mount() is None, reason="needs root and cgroup2")
def test_apply_sets_it_and_the_cli_reports_it():
    from typer.testing import CliRunner

    from sparring.cli.main import app

    before = tuning.cgroup2_mount()
    assert before is not None
    try:
        assert tuning.apply().favordynmods
        assert tuning.apply().favordynmods  # idempotent
        r = CliRunner().invoke(app, ["sandbox", "tune", "--json"])
        assert r.exit_code == 0, r.output
        out = json.loads(r.stdout)
        assert out == {"cgroup2_mount": str(before.path), "favordynmods": True, "supported": True}
    finally:
        if not before.favordynmods:  # leave the host as it was
            flags, data = tuning.remount_args(before)
            data = ",".join(o for o in data.split(",") if o != tuning.OPTION)
            mounts.mount("none", before.path, "cgroup2", data, flags=flags)
    after = tuning.cgroup2_mount()
    assert after is not None and after.favordynmods == before.favordynmods
