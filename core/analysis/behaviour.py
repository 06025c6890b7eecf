"""Error analysis of answers: how far off, and how often by a multiple of 10 (docs/method.md#the-papers-results).

Used on a model's own predictions, on predictions under a filter, and on a CSV of answers that
any model (an API model, say) gave, uploaded to the dashboard.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pandas as pd

from core.errors import CoreError

UPLOAD_COLUMNS = ("a", "b", "answer_given")
MAX_UPLOAD_ROWS = 100_000
#: Largest magnitude accepted in an uploaded column (keeps a + b, a * b and the errors within int64).
MAX_UPLOAD_VALUE = 10**9


@dataclass(frozen=True)
class ErrorSummary:
    n: int
    n_wrong: int
    accuracy: float
    share_multiple_of_10: float  # of the wrong answers, the share whose error is a multiple of 10
    share_within_2: float  # of the wrong answers, the share off by 1 or 2
    mean_abs_error: float  # over the wrong answers

    def as_row(self) -> dict:
        return dict(self.__dict__)


def errors(answers, predictions) -> np.ndarray:
    """Signed errors prediction - answer."""
    return np.asarray(predictions, dtype=np.int64) - np.asarray(answers, dtype=np.int64)


def error_summary(answers, predictions) -> ErrorSummary:
    err = errors(answers, predictions)
    wrong = err[err != 0]
    n, k = int(len(err)), int(len(wrong))
    nan = float("nan")
    return ErrorSummary(
        n=n,
        n_wrong=k,
        accuracy=float(np.mean(err == 0)) if n else nan,
        share_multiple_of_10=float(np.mean(wrong % 10 == 0)) if k else nan,
        share_within_2=float(np.mean(np.abs(wrong) <= 2)) if k else nan,
        mean_abs_error=float(np.mean(np.abs(wrong))) if k else nan,
    )


def error_histogram(answers, predictions) -> pd.DataFrame:
    """Count of each nonzero signed error: columns error, count."""
    err = errors(answers, predictions)
    values, counts = np.unique(err[err != 0], return_counts=True)
    return pd.DataFrame({"error": values.astype(np.int64), "count": counts.astype(np.int64)})


def read_answers_csv(data: bytes | str, max_rows: int = MAX_UPLOAD_ROWS, operation: str = "addition") -> pd.DataFrame:
    """Read and check an uploaded CSV with columns a, b, answer_given (whole numbers).

    Returns a frame with a, b, answer (the true result) and answer_given.
    """
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise CoreError("the file is not UTF-8 text: save it as a CSV (comma-separated, UTF-8)") from None
    try:
        frame = pd.read_csv(io.StringIO(data), nrows=max_rows + 1)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise CoreError(f"cannot read the file as CSV: {exc}") from None
    frame.columns = [str(c).strip().lower() for c in frame.columns]
    missing = [c for c in UPLOAD_COLUMNS if c not in frame.columns]
    if missing:
        raise CoreError(
            f"the CSV lacks the column(s) {', '.join(missing)}: it needs a header row with "
            f"{', '.join(UPLOAD_COLUMNS)} (found {', '.join(frame.columns) or 'none'})"
        )
    if len(frame) > max_rows:
        raise CoreError(f"the CSV has more than {max_rows:,} rows: upload at most {max_rows:,}")
    if len(frame) == 0:
        raise CoreError("the CSV has a header but no rows")
    out = {}
    for col in UPLOAD_COLUMNS:
        values = pd.to_numeric(frame[col], errors="coerce").astype(float)
        bad = values.isna() | (values != values.round())
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise CoreError(
                f"column {col} must hold whole numbers; row {row + 2} of the file has "
                f"'{_cell_text(frame[col].iloc[row])}'"
            )
        big = values.abs() > MAX_UPLOAD_VALUE
        if big.any():
            row = int(np.flatnonzero(big.to_numpy())[0])
            raise CoreError(
                f"column {col} must hold numbers between -{MAX_UPLOAD_VALUE:,} and {MAX_UPLOAD_VALUE:,}; "
                f"row {row + 2} of the file has '{_cell_text(frame[col].iloc[row])}'"
            )
        out[col] = values.astype(np.int64)
    result = pd.DataFrame(out)
    result["answer"] = result["a"] * result["b"] if operation == "multiplication" else result["a"] + result["b"]
    return result[["a", "b", "answer", "answer_given"]]


def _cell_text(value) -> str:
    """A cell as the user typed it (3.5, not np.float64(3.5); empty for a missing value)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    if isinstance(value, (np.generic,)):
        value = value.item()
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)
