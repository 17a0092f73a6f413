"""The ``spreadsheet`` family (see :mod:`.generator`): workbooks checked by recalculation, never by caches."""

from sparring.tasks.families.spreadsheet.generator import FAMILY, SpreadsheetGenerator, spreadsheet_task

__all__ = ["FAMILY", "SpreadsheetGenerator", "spreadsheet_task"]
