"""CSV files a spreadsheet opens safely: a text cell that a spreadsheet would run as a formula is written as text.

Excel, LibreOffice and Google Sheets treat a cell that starts with `=`, `+`, `-` or `@` (and, in some, a tab or a
carriage return) as a formula, so a downloaded table whose text came from a model's output or a file name could run
`=HYPERLINK(...)` or worse when a student opens it. Such text cells get a leading apostrophe, which the spreadsheet
shows as text (OWASP's advice for CSV injection). Numbers stay numbers: number columns are untouched, and a text
cell that is a plain number (`-5`, `+3.25`, `-1e3`) is not a formula and is left as it is.
"""

from __future__ import annotations

import re

import pandas as pd

#: What a spreadsheet may read as the start of a formula.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def safe_cell(value):
    """One cell as a spreadsheet should see it: text that would start a formula gets a leading apostrophe."""
    if isinstance(value, str) and value.startswith(FORMULA_START) and not _PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value


def spreadsheet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with every text cell made safe (`safe_cell`); number, boolean and date columns unchanged."""
    out = frame.copy()
    for col in out.columns:
        if pd.api.types.is_object_dtype(out[col]) or pd.api.types.is_string_dtype(out[col]):
            out[col] = out[col].map(safe_cell)
        elif isinstance(out[col].dtype, pd.CategoricalDtype):
            out[col] = out[col].astype(object).map(safe_cell)
    out.columns = [safe_cell(c) if isinstance(c, str) else c for c in out.columns]
    return out


def csv_text(frame: pd.DataFrame) -> str:
    """The frame as CSV text for a download: safe to open in a spreadsheet, without the index."""
    return spreadsheet_safe(frame).to_csv(index=False)
