"""The Behaviour page's upload: a CSV of a model's answers, read or refused in one line a student understands.

The checks run before the file reaches the reader of core (`core.analysis.behaviour.read_answers_csv`, which checks
the columns and the numbers): the size, what kind of file it is (an Excel workbook, a PDF, an image, other binary
data), its text encoding (UTF-8 with or without the byte-order mark Excel writes, UTF-16, or Windows' own), the
separator (commas; semicolons and tabs, as some spreadsheets save, are read too) and that every line has as many
values as the header. Every refusal is a `CoreError` of one sentence; the page shows it through
`app.guards.literal_text.literal`, so text from the file stays text.
"""

from __future__ import annotations

import csv
import io
import re

import pandas as pd

from core.analysis.behaviour import MAX_UPLOAD_ROWS, UPLOAD_COLUMNS, read_answers_csv
from core.errors import CoreError

#: The largest file the page reads (the same as `server.maxUploadSize` in .streamlit/config.toml).
MAX_UPLOAD_MB = 5
MAX_UPLOAD_BYTES = MAX_UPLOAD_MB * 2**20
COLUMNS = ", ".join(UPLOAD_COLUMNS)
HEADER = ",".join(UPLOAD_COLUMNS)
SAVE_AS_CSV = "save it from your spreadsheet as 'CSV UTF-8 (comma delimited)' and upload that file"

#: The first bytes of files people upload by mistake, and what to call them.
SIGNATURES = [
    (b"PK\x03\x04", "an Excel workbook (.xlsx) or another zip file"),
    (b"\xd0\xcf\x11\xe0", "an old Excel workbook (.xls)"),
    (b"%PDF", "a PDF document"),
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"\x1f\x8b", "a gzip-compressed file"),
]


def _text(data: bytes) -> str:
    """The file as text, or a one-line refusal for what is not text."""
    if not data.strip():
        raise CoreError(f"The file is empty: it needs a header row ({HEADER}) and one line per question.")
    for magic, what in SIGNATURES:
        if data.startswith(magic):
            raise CoreError(f"This is {what}, not a CSV: {SAVE_AS_CSV}.")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16 with its byte-order mark ("Unicode text")
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise CoreError(f"The file is not readable text: {SAVE_AS_CSV}.") from None
    if b"\x00" in data[:65536]:
        raise CoreError(f"This is not a text file (it holds binary data): {SAVE_AS_CSV}.")
    try:
        return data.decode("utf-8-sig")  # Excel's "CSV UTF-8" starts with a byte-order mark
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")  # an older spreadsheet's own encoding; numbers are ASCII


def _rows(text: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows, read with the file's separator; every line must have as many values as the header."""
    first = text.lstrip("\r\n").split("\n", 1)[0]
    sep = ","
    if "," not in first:
        sep = next((s for s in (";", "\t") if s in first), ",")
    try:
        lines = list(csv.reader(io.StringIO(text), delimiter=sep, strict=True))
    except csv.Error as exc:
        where = re.search(r"line (\d+)", str(exc))
        line = f"Line {where.group(1)} of the file" if where else "The file"
        raise CoreError(f"{line} cannot be read as CSV (a quote that is never closed?): {SAVE_AS_CSV}.") from None
    lines = [(i + 1, row) for i, row in enumerate(lines) if any(c.strip() for c in row)]  # blank lines are skipped
    if not lines:
        raise CoreError(f"The file has no header row: its first line must be {HEADER}.")
    (_, header), body = lines[0], lines[1:]
    if len(body) > MAX_UPLOAD_ROWS:
        raise CoreError(
            f"The file has {len(body):,} lines of answers; the page reads at most {MAX_UPLOAD_ROWS:,}: upload fewer."
        )
    for number, row in body:
        if len(row) != len(header):
            raise CoreError(
                f"Line {number} has {len(row)} value{'s' if len(row) != 1 else ''} but the header has {len(header)}: "
                f"every line needs {COLUMNS}, separated by commas."
            )
    return header, [row for _, row in body]


def read_upload(data: bytes) -> pd.DataFrame:
    """The uploaded answers (columns a, b, answer, answer_given), or a CoreError of one sentence that says what is
    wrong and what to do."""
    if len(data) > MAX_UPLOAD_BYTES:
        raise CoreError(
            f"The file is {len(data) / 2**20:.1f} MB; the page reads files up to {MAX_UPLOAD_MB} MB "
            f"(at most {MAX_UPLOAD_ROWS:,} answers): upload a smaller one."
        )
    header, rows = _rows(_text(data))
    out = io.StringIO()
    csv.writer(out).writerows([header, *rows])
    try:
        return read_answers_csv(out.getvalue())
    except CoreError as exc:  # core's sentence, as a sentence
        text = " ".join(str(exc).split())
        raise CoreError(text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")) from None
