"""The judge's interpreters start with ``-S`` and run the site set-up behind a guard (judge_imports.StartGuard).

An image may put the workspace's own path on ``sys.path`` at interpreter start (an editable install's ``.pth``
naming /testbed, which the sandbox shows the candidate's workspace at). Whatever the site set-up imports from
there (a ``.pth`` line's module, a ``sitecustomize``) would be the candidate's code running before the judge's
``start``. Behind the guard none of it is imported; the control runs the same set-up without it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib import resources
from pathlib import Path

INSIDE = str(resources.files("sparring.judge.inside"))
PAYLOAD = "import os\nwith open(os.environ['MARK'], 'a') as f:\n    f.write(__name__ + '\\n')\n"


def _run(tmp_path: Path, guarded: bool) -> tuple[str, str]:
    site_dir, cand, mark = tmp_path / "site-packages", tmp_path / "testbed", tmp_path / "mark"
    for d in (site_dir, cand):
        d.mkdir(exist_ok=True)
    (site_dir / "a_editable.pth").write_text(
        f"{cand}\n"
    )  # the workspace's path on sys.path, as pip -e leaves it
    (site_dir / "b_hook.pth").write_text(
        "import evilmod\n"
    )  # a .pth line naming a module only the candidate has
    (cand / "evilmod.py").write_text(PAYLOAD)
    (cand / "sitecustomize.py").write_text(PAYLOAD)
    mark.unlink(missing_ok=True)
    script = textwrap.dedent(
        f"""
        import site, sys
        sys.path.insert(0, {INSIDE!r})
        import judge_imports
        if {guarded!r}:
            judge_imports.start_site([{str(cand)!r}])
        else:
            site.main()
        site.addsitedir({str(site_dir)!r})  # the image's site-packages, set up like the interpreter's own
        site.execsitecustomize()
        print({str(cand)!r} in sys.path, "sitecustomize" in sys.modules and sys.modules["sitecustomize"].__file__)
        """
    )
    r = subprocess.run([sys.executable, "-s", "-S", "-c", script], capture_output=True, text=True, timeout=60,
                       env={"MARK": str(mark), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout, mark.read_text() if mark.exists() else ""


def test_the_site_setup_behind_the_guard_runs_nothing_of_the_candidates(tmp_path):
    out, ran = _run(tmp_path, guarded=True)
    assert ran == ""  # neither the .pth line's module nor the sitecustomize under the candidate's path ran
    assert out.split()[0] == "True"  # the path itself is set up as without the guard (its imports come later)


def test_without_the_guard_the_same_setup_runs_the_candidates_code(tmp_path):
    out, ran = _run(tmp_path, guarded=False)
    assert "evilmod" in ran.split() and "sitecustomize" in ran.split()  # the control: both ran at start


def test_the_jobs_gate_replaces_the_guard(tmp_path):
    """Once the job's gate is in (the judge's ``start``), modules under the candidate's paths are the gate's
    matter: imported by the candidate's own code and the tests, refused to anyone else."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {INSIDE!r})
        import judge_imports
        judge_imports.start_site([{str(tmp_path)!r}])
        before = [type(f).__name__ for f in sys.meta_path][:1]
        judge_imports.gate("/workspace", [], lambda n, w: None, [{str(tmp_path)!r}])
        print(before, [type(f).__name__ for f in sys.meta_path if "Guard" in type(f).__name__ or "Gate" in type(f).__name__])
        """
    )
    r = subprocess.run([sys.executable, "-s", "-S", "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['StartGuard'] ['WorkspaceGate']"
