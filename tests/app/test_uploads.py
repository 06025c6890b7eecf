"""Uploads refused in one line a student understands (app/guards/uploads.py), and CSV downloads a spreadsheet opens
without running anything (app/guards/csv_safety.py)."""

from __future__ import annotations

import io
import tomllib
import zipfile

import numpy as np
import pandas as pd
import pytest

from app.guards.csv_safety import csv_text, safe_cell, spreadsheet_safe
from app.guards.literal_text import WORD_JOINER, literal
from app.guards.uploads import MAX_UPLOAD_BYTES, MAX_UPLOAD_MB, read_upload
from core.errors import CoreError
from core.files import PROJECT_ROOT

GOOD = "a,b,answer_given\n15,93,108\n1,2,4\n"


def xlsx_bytes() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
    return buf.getvalue()


HOSTILE = {
    "oversize": (b"a,b,answer_given\n" + b"1,2,3\n" * (MAX_UPLOAD_BYTES // 6 + 10), "MB; the page reads files up to"),
    "empty": (b"", "The file is empty"),
    "only blank lines": (b"\n\n  \n", "The file is empty"),
    "excel workbook": (xlsx_bytes(), "This is an Excel workbook (.xlsx)"),
    "png image": (b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "This is a PNG image, not a CSV"),
    "pdf": (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", "This is a PDF document, not a CSV"),
    "binary data": (b"a,b\x00\x01\x02,answer_given\n", "This is not a text file (it holds binary data)"),
    "ragged line": (b"a,b,answer_given\n1,2,3\n4,5,6,7\n", "Line 3 has 4 values but the header has 3"),
    "unclosed quote": (b'a,b,answer_given\n1,2,"3\n', "cannot be read as CSV (a quote that is never closed?)"),
    "missing column": (b"a,b,answer\n1,2,3\n", "lacks the column(s) answer_given"),
    "header only": (b"a,b,answer_given\n", "has a header but no rows"),
    "formula": (b"a,b,answer_given\n=1+2,2,3\n", "must hold whole numbers; row 2 of the file has '=1+2'"),
    "text number": (b"a,b,answer_given\n1,two,3\n", "Column b must hold whole numbers"),
    "huge number": (b"a,b,answer_given\n1,2,99999999999999\n", "numbers between"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_upload_is_refused_in_one_sentence(name):
    data, words = HOSTILE[name]
    with pytest.raises(CoreError) as refused:
        read_upload(data)
    message = str(refused.value)
    assert words in message, message
    assert "\n" not in message and len(message) < 260 and message[0].isupper() and message.endswith("."), message
    assert "Error tokenizing" not in message and "Traceback" not in message


@pytest.mark.parametrize(
    "data",
    [
        GOOD.encode(),
        b"\xef\xbb\xbf" + GOOD.encode(),  # Excel's "CSV UTF-8": a byte-order mark first
        GOOD.encode("utf-16"),  # "Unicode text"
        GOOD.replace(",", ";").encode(),  # a spreadsheet set to semicolons
        GOOD.replace(",", "\t").encode(),
        ("A, B ,Answer_Given\r\n15,93,108\r\n\r\n1,2,4\r\n").encode("cp1252"),  # spaces, capitals, CRLF, a blank line
    ],
)
def test_what_spreadsheets_save_is_read(data):
    frame = read_upload(data)
    assert frame[["a", "b", "answer", "answer_given"]].values.tolist() == [[15, 93, 108, 108], [1, 2, 3, 4]]


def test_the_page_limit_is_the_servers():
    config = tomllib.loads((PROJECT_ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["maxUploadSize"] == MAX_UPLOAD_MB


def test_text_from_a_file_is_shown_literally():
    text = literal("row 2 has '[free marks](https://example.org) **now** <img src=x> :red[x] me@example.org'\n2")
    assert "\\[free marks\\]\\(https\\:" + WORD_JOINER + "//" in text  # no link, not even an automatic one
    assert "\\*\\*now\\*\\*" in text and "\\<img" in text and "\\:red\\[x\\]" in text
    assert "me\\@" + WORD_JOINER + "example" in text and "\n" not in text


def test_csv_downloads_escape_formulas_and_keep_numbers():
    frame = pd.DataFrame(
        {
            "label": ['=HYPERLINK("http://x")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "plain", "-5", "+3.25", None],
            "n": [-1, 2, -3, 4, 5, 6, 7, 8, 9],
            "x": np.linspace(-1, 1, 9),
            "cat": pd.Categorical(["=a", "b", "=a", "b", "b", "b", "b", "b", "b"]),
        }
    )
    safe = spreadsheet_safe(frame)
    assert safe["label"].tolist()[:6] == ['\'=HYPERLINK("http://x")', "'+1+1", "'-2+3", "'@SUM(A1)", "'\tx", "plain"]
    assert safe["label"].tolist()[6:8] == ["-5", "+3.25"] and pd.isna(safe["label"].iloc[8])  # numbers stay numbers
    assert safe["n"].tolist() == frame["n"].tolist() and safe["x"].equals(frame["x"])
    assert safe["cat"].tolist()[:2] == ["'=a", "b"]
    assert frame["label"].iloc[0].startswith("=")  # the page's own frame is not changed
    back = pd.read_csv(io.StringIO(csv_text(frame)))
    assert back["n"].tolist() == frame["n"].tolist() and np.allclose(back["x"], frame["x"])
    risky = [v for v in back["label"].dropna().astype(str) if v.startswith(("=", "+", "-", "@"))]
    assert risky == ["-5", "3.25"] or risky == ["-5", "+3.25"], risky  # only the numbers written as text
    assert safe_cell(-3) == -3 and safe_cell("-1e3") == "-1e3" and safe_cell("- 5") == "'- 5"
