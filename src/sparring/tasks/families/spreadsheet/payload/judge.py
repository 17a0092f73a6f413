"""The spreadsheet family's hidden test: runs INSIDE the judge's sandbox, over the candidate's workbook.

The generator writes this module's source as ``hidden/test_workbook.py`` with the
``# @@NAME@@`` lines replaced by the task's constants. What it checks:

* every answer cell that must hold a formula holds one (a typed value where a
  formula is asked for fails), and none reaches outside the workbook;
* the Data sheet's input cells are as given (editing the checker's inputs fails);
* the candidate's workbook, re-saved through openpyxl (no cached values, no
  macros, no external links survive) and recalculated by LibreOffice headless
  (a fresh profile that recalculates on every load and never runs macros; the
  sandbox has no network; bounded time), computes the expected values;
* the same workbook with the Data rows replaced by each unseen variant computes
  that variant's values (a workbook-specific answer fails).

The expected values are module constants compared with ``==`` against
``pytest.approx``: the judge's probe keeps them on the host (see
:mod:`sparring.judge.dynamic.probe`), so they are never in the sandbox. No cached value
of any workbook is ever read as an answer: only LibreOffice's own results.
"""

import contextlib
import functools
import os
import re
import signal
import subprocess
import tempfile

import openpyxl
import pytest

SPEC = {"book": "book.xlsx", "targets": [], "inputs": [], "variants": 0}  # @@SPEC@@
EXPECTED_0: list = []  # @@EXPECTED_0@@
EXPECTED_1: list = []  # @@EXPECTED_1@@
EXPECTED_2: list = []  # @@EXPECTED_2@@
EXPECTED_3: list = []  # @@EXPECTED_3@@

SOFFICE = "/usr/bin/soffice"
PACKAGE = "libreoffice-calc-nogui"
TIMEOUT_S = 90
FORBIDDEN = re.compile(r"\[|WEBSERVICE\(|FILTERXML\(|\bDDE\(|file:|https?:", re.IGNORECASE)
PROFILE = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema"
 xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="OOXMLRecalcMode" oor:op="fuse">
<value>0</value></prop></item>
<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="ODFRecalcMode" oor:op="fuse">
<value>0</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Security/Scripting"><prop oor:name="MacroSecurityLevel"
 oor:op="fuse"><value>3</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Security/Scripting"><prop oor:name="DisableMacrosExecution"
 oor:op="fuse"><value>true</value></prop></item>
</oor:items>
"""


def _book():
    return openpyxl.load_workbook(SPEC["book"], keep_vba=False, keep_links=False, rich_text=False)


def _formula_text(value):
    """The formula a cell holds, or None for a plain value."""
    text = getattr(value, "text", value)  # array formulas carry their text
    if isinstance(text, str) and text.startswith("=") and len(text) > 1:
        return text
    return None


def not_formulas():
    """Answer cells that must hold a formula but hold a value (or a formula reaching outside the workbook)."""
    wb = _book()
    bad = []
    for sheet, cell, formula in SPEC["targets"]:
        if not formula:
            continue
        value = wb[sheet][cell].value if sheet in wb.sheetnames else None
        text = _formula_text(value)
        if text is None or FORBIDDEN.search(text):
            bad.append(f"{sheet}!{cell}")
    return bad


def changed_inputs():
    """Input cells of the given data that the candidate changed."""
    wb = _book()
    if "Data" not in wb.sheetnames:
        return ["Data"]
    ws = wb["Data"]
    return sorted(ref for ref, value in SPEC["inputs"][0].items() if ws[ref].value != value)


def _soffice(paths, outdir, home):
    if not os.path.exists(SOFFICE):
        raise RuntimeError(f"LibreOffice is missing ({SOFFICE}): install {PACKAGE}")
    profile = os.path.join(home, "profile")
    os.makedirs(os.path.join(profile, "user"))
    with open(os.path.join(profile, "user", "registrymodifications.xcu"), "w") as f:
        f.write(PROFILE)
    env = {"HOME": home, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TMPDIR": home}
    cmd = [SOFFICE, f"-env:UserInstallation=file://{profile}", "--headless", "--invisible", "--norestore",
           "--nologo", "--nolockcheck", "--nodefault", "--convert-to", "xlsx:Calc MS Excel 2007 XML",
           "--outdir", outdir, *paths]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RuntimeError(f"LibreOffice did not finish within {TIMEOUT_S}s") from None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # nothing of LibreOffice outlives the conversion
    return out.decode(errors="replace")


def _number(value):
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return float(value)


@functools.lru_cache(maxsize=1)
def recalculated():
    """Target values per dataset (0: given data, then each variant), as LibreOffice computes them."""
    home = tempfile.mkdtemp(prefix="recalc-")
    indir, outdir = os.path.join(home, "in"), os.path.join(home, "out")
    os.makedirs(indir)
    os.makedirs(outdir)
    paths = []
    for i, inputs in enumerate(SPEC["inputs"]):
        wb = _book()
        ws = wb["Data"]
        for ref, value in inputs.items():
            ws[ref] = value
        path = os.path.join(indir, f"book{i}.xlsx")
        wb.save(path)  # openpyxl writes formulas without cached values
        paths.append(path)
    log = _soffice(paths, outdir, home)
    out = []
    for i in range(len(paths)):
        done = os.path.join(outdir, f"book{i}.xlsx")
        if not os.path.exists(done):
            raise RuntimeError(f"LibreOffice did not convert dataset {i}: {log[-300:]}")
        wb = openpyxl.load_workbook(done, data_only=True)
        out.append([_number(wb[s][c].value) if s in wb.sheetnames else None for s, c, _ in SPEC["targets"]])
    return out


def test_answer_cells_hold_formulas():
    assert not_formulas() == []


def test_input_cells_unchanged():
    assert changed_inputs() == []


def test_values_on_given_data():
    assert recalculated()[0] == pytest.approx(EXPECTED_0, rel=1e-6, abs=1e-6)


def test_values_on_unseen_variant_1():
    assert recalculated()[1] == pytest.approx(EXPECTED_1, rel=1e-6, abs=1e-6)


def test_values_on_unseen_variant_2():
    assert recalculated()[2] == pytest.approx(EXPECTED_2, rel=1e-6, abs=1e-6)


def test_values_on_unseen_variant_3():
    assert recalculated()[3] == pytest.approx(EXPECTED_3, rel=1e-6, abs=1e-6)
