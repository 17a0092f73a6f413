"""The judge's code that runs INSIDE the candidate's sandbox (untrusted side of the trust boundary).

Everything here runs under the interpreter of the task's image (Python 3.8 to 3.13, its own pytest),
in a sandbox the candidate's code runs in too, with the candidate's workspace on ``sys.path``:

- :mod:`.judge_launcher`: the pytest launcher, which runs the probes (the judge's tests, rewritten on
  the host so that they only observe) and writes the report lines the host reads;
- :mod:`.judge_driver`: the dynamic-test driver, which calls the candidate's function on inputs the
  host chose and prints the encoded outputs;
- :mod:`.judge_observe`: what a probe records, and the value encoding (the wire format) that the
  host decodes (:mod:`sparring.judge.withheld`);
- :mod:`.judge_imports`: source-only imports from the workspace and the gate that keeps workspace
  modules away from the tests' dependencies.

The modules are staged side by side in the sandbox's read-only ``/judge/cfg`` under their own file
names (:func:`module_files`, :mod:`sparring.judge.runner.sandbox`) and import each other by bare
name there (``import judge_imports``); the ``judge_`` prefix keeps those names clear of the
candidate's modules (a workspace module that shadows one of them is refused by the import gate).
They import only the standard library, pytest and each other, never the host's code
(``tests/judge/test_inside_imports.py``); the host may import their constants and codecs.
Nothing the host decides (expected values, the verdict) is computed here.
"""

from __future__ import annotations

from importlib import resources


def module_files() -> tuple[str, ...]:
    """The file name of every module of this package but ``__init__.py``: what is staged in ``/judge/cfg``."""
    return tuple(sorted(
        p.name for p in resources.files(__name__).iterdir()
        if p.name.endswith(".py") and p.name != "__init__.py"
    ))  # fmt: skip
