"""Build importable non-source payloads for the judge's tests: a real extension module, a crafted pyc.

Each payload carries Python source that runs when the module is imported, so a test can show the
payload really shadows the ``.py`` beside it (positive control) before asserting the judge refuses it.
"""

from __future__ import annotations

import importlib.util
import json
import marshal
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

C_TEMPLATE = """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "%(name)s", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_%(name)s(void) {
    PyObject *m = PyModule_Create(&def);
    if (m == NULL) return NULL;
    PyObject *d = PyModule_GetDict(m);
    PyDict_SetItemString(d, "__builtins__", PyEval_GetBuiltins());
    PyObject *r = PyRun_String(%(src)s, Py_file_input, d, d);
    if (r == NULL) { Py_DECREF(m); return NULL; }
    Py_DECREF(r);
    return m;
}
"""


def extension_suffix() -> str:
    return str(sysconfig.get_config_var("EXT_SUFFIX"))


def build_extension(tmp: Path, name: str, source: str) -> bytes:
    """A CPython extension module ``name`` (built with the host's gcc and headers, for this interpreter,
    which the sandboxes also run) whose import executes ``source`` in its namespace."""
    gcc = shutil.which("gcc")
    include = Path(sysconfig.get_paths()["include"])
    if gcc is None or not (include / "Python.h").is_file():
        pytest.fail("gcc and the Python headers are needed to build the extension-module attack")
    c = tmp / f"{name}.c"
    c.write_text(C_TEMPLATE % {"name": name, "src": json.dumps(source)})
    out = tmp / f"{name}{extension_suffix()}"
    subprocess.run([gcc, "-shared", "-fPIC", "-O0", f"-I{include}", str(c), "-o", str(out)], check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    return out.read_bytes()


def unchecked_pyc(source: str, filename: str) -> bytes:
    """An unchecked-hash pyc (PEP 552) of ``source``: the interpreter loads it without looking at the
    ``.py`` beside it, whatever that file's content or time stamp."""
    code = compile(source, filename, "exec", dont_inherit=True)
    flags = 0b01  # hash-based, check_source = 0
    return importlib.util.MAGIC_NUMBER + flags.to_bytes(4, "little") + b"\0" * 8 + marshal.dumps(code)


def cache_tag() -> str:
    return str(sys.implementation.cache_tag)
