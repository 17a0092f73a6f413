"""The spreadsheet tasks' tool server: runs INSIDE the agent's sandbox as ``.tools/sheet.py``.

Called once per tool call with the tool's name as the last argument and the
call's arguments, a JSON object, on stdin (:class:`sparring.tasks.spec.CustomTool`).
It edits ``book.xlsx`` through openpyxl, so an agent can read and write cells
and formulas as text without handling the zip itself.
"""

import json
import sys

import openpyxl
from openpyxl.utils.cell import range_boundaries

BOOK = "book.xlsx"
MAX_CELLS = 400


def sheets(_args):
    wb = openpyxl.load_workbook(BOOK)
    return "\n".join(f"{ws.title}: {ws.dimensions}" for ws in wb.worksheets)


def read(args):
    wb = openpyxl.load_workbook(BOOK)
    sheet = args["sheet"]
    if sheet not in wb.sheetnames:
        return f"no sheet {sheet!r} (sheets: {', '.join(wb.sheetnames)})"
    ws = wb[sheet]
    min_col, min_row, max_col, max_row = range_boundaries(args.get("range") or ws.dimensions)
    lines = []
    for row in ws.iter_rows(min_row=min_row, max_row=max_row, min_col=min_col, max_col=max_col):
        for cell in row:
            if cell.value is not None and len(lines) < MAX_CELLS:
                lines.append(f"{cell.coordinate}: {getattr(cell.value, 'text', cell.value)!r}")
    return "\n".join(lines) or "(no values in that range)"


def _parse(text):
    if text.startswith("="):
        return text
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def write(args):
    wb = openpyxl.load_workbook(BOOK)
    sheet = args["sheet"]
    ws = wb[sheet] if sheet in wb.sheetnames else wb.create_sheet(sheet)
    cells = args.get("cells") or {args["cell"]: args.get("value", "")}
    for ref, text in cells.items():
        ws[ref] = _parse(str(text)) if str(text) != "" else None
    wb.save(BOOK)
    return f"wrote {len(cells)} cell(s) of {sheet}"


TOOLS = {"sheet_list": sheets, "sheet_read": read, "sheet_write": write}

if __name__ == "__main__":
    try:
        print(TOOLS[sys.argv[-1]](json.load(sys.stdin)))
    except Exception as e:  # an observation for the model, not a crash
        print(f"error: {type(e).__name__}: {e}")
        sys.exit(1)
