"""Workbooks as deterministic bytes, and the one-line error when LibreOffice is missing.

openpyxl stamps the time into ``docProps/core.xml`` and into every zip entry;
a task's digest covers its files, so the same seed must give the same bytes:
:func:`to_bytes` fixes the document times and rewrites the zip with fixed entry
times. openpyxl writes formulas without cached values, so a gold workbook
written here reads as empty to anything that does not recalculate it (which is
why the judge never compares with a gold file: see ``payload/judge.py``).
"""

from __future__ import annotations

import datetime as dt
import io
import shutil
import zipfile
from typing import Any

from sparring.errors import ConfigError

LIBREOFFICE_PACKAGE = "libreoffice-calc-nogui"
SOFFICE = "/usr/bin/soffice"
EPOCH = dt.datetime(2020, 1, 1)
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def require_libreoffice() -> None:
    """ConfigError naming the package when LibreOffice (the judge's recalculation engine) is missing."""
    if shutil.which(SOFFICE) is None:
        raise ConfigError(
            f"spreadsheet tasks need LibreOffice ({SOFFICE}): install {LIBREOFFICE_PACKAGE} (make system)"
        )


def require_openpyxl() -> None:
    try:
        import openpyxl  # noqa: F401
    except ImportError:
        raise ConfigError("spreadsheet tasks need openpyxl: pip install 'sparring[spreadsheet]'") from None


def build(sheets: dict[str, dict[str, Any]]) -> bytes:
    """A workbook with the given sheets (name -> cell -> value; a str starting with ``=`` is a formula)."""
    require_openpyxl()
    import openpyxl

    wb = openpyxl.Workbook()
    first = True
    for name, cells in sheets.items():
        ws = wb.active if first else wb.create_sheet(name)
        assert ws is not None
        ws.title = name
        first = False
        for ref, value in sorted(cells.items()):
            ws[ref] = value
    wb.properties.creator = "sparring"
    wb.properties.created = EPOCH
    wb.properties.modified = EPOCH
    buf = io.BytesIO()
    wb.save(buf)
    return normalize_zip(buf.getvalue())


def normalize_zip(data: bytes) -> bytes:
    """The same archive with fixed entry times (openpyxl writes the wall clock into each entry)."""
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = src.read(info.filename)
            if info.filename == "docProps/core.xml":
                body = _fixed_core(body)
            fixed = zipfile.ZipInfo(info.filename, date_time=ZIP_TIME)
            fixed.compress_type = zipfile.ZIP_DEFLATED
            fixed.external_attr = 0o644 << 16
            dst.writestr(fixed, body)
    return out.getvalue()


def _fixed_core(body: bytes) -> bytes:
    # openpyxl sets dcterms:modified to now on save whatever the property says.
    import re

    stamp = EPOCH.strftime("%Y-%m-%dT%H:%M:%SZ").encode()
    return re.sub(
        rb"(<dcterms:(?:created|modified)[^>]*>)[^<]*(</dcterms)", rb"\g<1>" + stamp + rb"\g<2>", body
    )


def read_cells(data: bytes, formulas: bool = True) -> dict[str, dict[str, Any]]:
    """Every non-empty cell of a workbook (formulas as text, or the cached values with ``formulas=False``)."""
    import openpyxl

    wb = openpyxl.load_workbook(io.BytesIO(data), data_only=not formulas)
    return {ws.title: {c.coordinate: c.value for row in ws.iter_rows() for c in row if c.value is not None}
            for ws in wb.worksheets}  # fmt: skip
