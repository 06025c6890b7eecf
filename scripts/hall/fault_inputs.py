"""Hostile links and hostile uploads (scripts/hall/faults.py), through the server as a browser sends them.

Links: every URL parameter of every page (LINK_PARAMS, which tests/app/test_faults.py checks against every
`url_state` call of the app) gets a value out of range, of the wrong type, 5,000 characters long, or with markup.
Each page must open with no exception and no error box, with a one-line note that names the parameter and shows its
text as text, and with the parameter at its default (the value the same page shows without it). The full run opens
one link per page, parameter and kind; the quick one puts all of a page's parameters in one link per kind.

Uploads: the Behaviour page's file uploader is driven as the browser drives it (ask the session for an upload URL,
PUT the file with the XSRF token, then rerun with the file in the widget's state). Each hostile file must be refused
by the server or by the page in one line with the words a student needs, never with an exception.
"""

from __future__ import annotations

import asyncio
import http.client
import http.cookies
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.Common_pb2 import UploadedFileInfo

from core.files import PROJECT_ROOT
from core.runs import cache as run_cache
from scripts.hall.fault_class import FaultRow, Served, student_address
from scripts.hall.fault_live import live_run
from scripts.hall.session_client import Session

#: Every URL parameter: (the pages that read it, its kind). "" is the Tour (the default page); "all" is every page.
LINK_PARAMS = {
    "split": ("all", "choice"),
    "run": ("all", "choice"),
    "compare": ("all", "choice"),
    "basis": ("all", "choice"),
    "tau": ("all", "int"),
    "large": ("all", "flag"),
    "step": ("", "int"),
    "best": ("", "flag"),
    "reveal": ("", "flag"),
    "norm": ("logit-lens", "flag"),
    "layer": ("logit-lens spectra", "int"),
    "example": ("logit-lens waves", "choice"),
    "module": ("spectra", "choice"),
    "k": ("waves", "int"),
    "window": ("waves", "int"),
    "hperiod": ("waves", "choice"),
    "headlayer": ("waves", "int"),
    "headnumber": ("waves", "int"),
    "cell": ("ablations", "choice"),
    "live_modules": ("ablations", "choice"),
    "live_removed": ("ablations", "choice"),
    "nlayer": ("embeddings", "int"),
    "matrix": ("embeddings", "choice"),
    "colour": ("embeddings", "choice"),
    "turn": ("embeddings", "int"),
    "helixlayer": ("embeddings", "choice"),
    "curve_split": ("training", "choice"),
    "shots": ("behaviour", "int"),
}
PAGES = ["", "logit-lens", "spectra", "waves", "ablations", "embeddings", "patching", "training", "behaviour", "terms"]
MARKUP = "<b>x</b>[click](https://example.org)**y**"
#: A hostile value of each kind, by the parameter's type.
HOSTILE = {
    "out of range": {"int": "99999", "flag": "2", "choice": "no-such-choice"},
    "wrong type": {"int": "abc", "flag": "maybe", "choice": "0.5"},
    "very long": {"int": "9" * 5000, "flag": "1" * 5000, "choice": "x" * 5000},
    "markup": {"int": MARKUP, "flag": MARKUP, "choice": MARKUP},
}
#: In one link with all of a page's parameters, "very long" is this long each (the whole link stays under the
#: proxy's 16 kB request limit; one 5,000-character value is tried per parameter in the full run).
COMBINED_LONG = 1000


def params_of(page: str) -> list[str]:
    return [p for p, (pages, _) in LINK_PARAMS.items() if pages == "all" or page in pages.split(" ")]


def page_runs(cache_dir) -> dict[str, str]:
    """The run each page needs for all its parameters to appear: a live-capable single-token run for the Ablations
    and Numbers pages, the k-shot run for Behaviour (the others use the default run)."""
    runs = [r for r in run_cache.list_runs(cache_dir) if r.ok]
    kshot = [r.name for r in runs if "generations" in (r.manifest.get("tables") or {})]
    chosen = {}
    chosen["ablations"] = chosen["embeddings"] = live_run(cache_dir)
    if kshot:
        chosen["behaviour"] = kshot[0]
    return chosen


async def _open(base: str, page: str, query: dict, timeout: float = 60.0) -> Session:
    link = f"/{page}?{urllib.parse.urlencode(query)}"
    s = Session(base, random.Random(0), (0, 0), timeout, link=link, source=student_address())
    try:
        await s.open()
    finally:
        await s.close()
    return s


def _url_values(query: str) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(query, keep_blank_values=True))


def _check(s: Session, hostile: dict, baseline: dict) -> list[str]:
    """What is wrong with a page opened from a hostile link (empty: nothing)."""
    where = s.link[:80]
    problems = [f"{where}: {e}" for e in s.errors]
    if s.open_s is None:
        return problems or [f"{where}: did not open"]
    shown = _url_values(s.query)
    for param, value in hostile.items():
        notes = [t for t in s.toasts if t.startswith(f"The link asks for {param} '")]
        if not notes:
            problems.append(f"{where}: no note for {param}")
        elif any("\n" in t or len(t) > 200 for t in notes):
            problems.append(f"{where}: the note for {param} is not one line")
        elif any(raw in notes[0] for raw in ("<b>", "](", "**")):
            problems.append(f"{where}: the note for {param} draws the link's markup")
        if shown.get(param) != baseline.get(param):
            problems.append(f"{where}: {param} shows {shown.get(param)!r:.40}, not its default {baseline.get(param)!r}")
    return problems


async def _in_batches(coros: Iterable, size: int = 6) -> list:
    coros, done = list(coros), []
    for i in range(0, len(coros), size):
        done += await asyncio.gather(*coros[i : i + size])
    return done


async def hostile_links(served: Served, quick: bool = False, cache_dir=None) -> FaultRow:
    runs = page_runs(cache_dir or PROJECT_ROOT / "cache")
    t0 = time.monotonic()
    base_query = {page: ({"run": runs[page]} if page in runs else {}) for page in PAGES}
    baselines = dict(zip(PAGES, await _in_batches(_open(served.base, p, base_query[p]) for p in PAGES)))
    problems = [f"/{p} without hostile values: {e}" for p, s in baselines.items() for e in s.errors]
    cases = []  # (page, {param: value})
    for page in PAGES:
        params = [p for p in params_of(page) if not (page in runs and p in ("run", "split"))]  # the run it needs
        for kind, values in HOSTILE.items():
            if quick:
                hostile = {p: values[LINK_PARAMS[p][1]] for p in params}
                if kind == "very long":
                    hostile = {p: v[:COMBINED_LONG] for p, v in hostile.items()}
                cases.append((page, hostile))
            else:
                cases += [(page, {p: values[LINK_PARAMS[p][1]]}) for p in params_of(page)]
    opened = await _in_batches(_open(served.base, page, {**base_query[page], **hostile}) for page, hostile in cases)
    for (page, hostile), s in zip(cases, opened):
        baseline = _url_values(baselines[page].query)
        problems += _check(s, {p: v for p, v in hostile.items() if not (p == "run" and page in runs)}, baseline)
    checked = sum(len(h) for _, h in cases)
    too_long = _too_long_link(served) if (served.out / "haproxy.cfg").exists() else None
    if too_long is not None and too_long[0] != 400:
        problems.append(f"a 20,000-character link got HTTP {too_long[0]}, not the proxy's 400 page")
    took = time.monotonic() - t0
    opens = [s.open_s for s in opened if s.open_s]
    return FaultRow(
        fault=f"hostile links: {len(LINK_PARAMS)} URL parameters on {len(PAGES)} pages, 4 kinds of bad value",
        bound="every page opens, no exception or error box; a one-line note names each bad parameter (its text "
        "shown as text); the parameter at its default",
        passed=not problems,
        measured=f"{len(cases)} links, {checked} bad values: {checked - len(problems)} noted and at their default; "
        f"page open p95 {sorted(opens)[int(0.95 * (len(opens) - 1))]:.2f} s; {took:.0f} s in all"
        + ("; a 20,000-character link: HAProxy's own 400 page" if too_long and too_long[0] == 400 else ""),
        student_saw="the page as it is by default, and a note for a few seconds: \"The link asks for tau '99999', "
        'which is not here: showing 50 instead."',
        recovery="-",
        lost="nothing",
        details={"links": len(cases), "values": checked, "problems": problems[:20]},
        problems=problems[:10],
    )


def _too_long_link(served: Served) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(served.base + "/?run=" + "x" * 20000, timeout=30) as r:
            return r.status, r.read(500).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(500).decode(errors="replace")


# ----------------------------------------------------------------------------- uploads


def _xlsx() -> bytes:
    return b"PK\x03\x04" + bytes(200)


#: name -> (file name, bytes, words the refusal must hold; None: the file is read and analysed)
UPLOADS = {
    "oversize (6 MB)": ("answers.csv", b"a,b,answer_given\n" + b"1,2,3\n" * (6 * 2**20 // 6), "HTTP 413"),
    "Excel workbook renamed .csv": ("answers.csv", _xlsx(), "This is an Excel workbook (.xlsx)"),
    "PNG image renamed .csv": ("answers.csv", b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "This is a PNG image"),
    "binary data": ("answers.csv", b"a,b,answer_given\n\x00\x01\x02\x03", "not a text file"),
    "empty file": ("answers.csv", b"", "The file is empty"),
    "ragged lines": ("answers.csv", b"a,b,answer_given\n1,2,3\n4,5,6,7\n", "Line 3 has 4 values"),
    "unclosed quote": ("answers.csv", b'a,b,answer_given\n1,2,"3\n', "never closed"),
    "missing column": ("answers.csv", b"a,b,answer\n1,2,3\n", "lacks the column(s) answer_given"),
    "formula in a cell": ("answers.csv", b"a,b,answer_given\n=1+2,2,3\n", "must hold whole numbers"),
    "markup in a cell": ("answers.csv", b"a,b,answer_given\n[click](https://example.org),2,3\n", "whole numbers"),
    "markup in the file name": ("[x](https:__e.org)<b>.csv", b"a,b,answer_given\n15,93,108\n", None),
    "a good file (Excel's CSV UTF-8)": ("answers.csv", b"\xef\xbb\xbfa,b,answer_given\n15,93,108\n1,2,4\n", None),
}


async def _upload(base: str, run: str | None, name: str, data: bytes) -> dict:
    """Open the Behaviour page, upload one file as the browser does; what the page showed."""
    query = urllib.parse.urlencode({"run": run} if run else {})
    s = Session(base, random.Random(0), (0, 0), 60.0, link=f"/behaviour?{query}", source=student_address())
    s.expect_errors = True
    seen = {"http": None, "alerts": [], "errors": [], "metrics": []}
    try:
        if not await s.open():
            seen["errors"] = s.errors
            return seen
        widget = s.widget("file_uploader", label="CSV of answers")
        ask = BackMsg()
        ask.file_urls_request.request_id = "upload-1"
        ask.file_urls_request.file_names.append(name)
        ask.file_urls_request.session_id = s.session_id
        await s.ws.send(ask.SerializeToString())
        urls = (await s.next_message("file_urls_response")).file_urls[0]
        seen["http"] = await asyncio.to_thread(_put, s, urls.upload_url, name, data)
        if seen["http"] in (200, 204):
            state = s.widget_state(widget)
            state.file_uploader_state_value.uploaded_file_info.append(
                UploadedFileInfo(name=name, size=len(data), file_id=urls.file_id, file_urls=urls)
            )
            await s.ws.send(s.rerun_msg(state).SerializeToString())
            await s.until_finished("upload")
            seen["alerts"] = s.alerts
            seen["metrics"] = [el.label for t, el in s.elements if t == "metric"]
        seen["errors"] = s.errors
    except Exception as exc:  # noqa: BLE001
        seen["errors"] = [*s.errors, f"{type(exc).__name__}: {exc}"]
    finally:
        await s.close()
    return seen


#: The server closed the connection before its answer (a refused upload, through the proxy).
CLOSED = -1


def _put(s: Session, url: str, name: str, data: bytes) -> int:
    """PUT the file as Streamlit's uploader does (multipart form, the XSRF token from its cookie in a header); the
    HTTP status. A server that refuses a large file before reading it may close the connection while it is sent:
    its answer is read all the same."""
    jar = http.cookies.SimpleCookie()
    jar.load(s.cookies)
    token = jar["_streamlit_xsrf"].value if "_streamlit_xsrf" in jar else ""
    boundary = "----faults" + str(time.time_ns())
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            "Content-Type: text/csv\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    parts = urllib.parse.urlsplit(s.base)
    source = {"source_address": (s.source, 0)} if s.source else {}
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60, **source)
    try:
        conn.putrequest("PUT", url if url.startswith("/") else urllib.parse.urlsplit(url).path)
        for k, v in {
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Content-Length": str(len(body)),
            "X-Xsrftoken": token,
            "Cookie": s.cookies,
            "Origin": s.base,
        }.items():
            conn.putheader(k, v)
        conn.endheaders()
        try:
            conn.send(body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            return conn.getresponse().status
        except (http.client.RemoteDisconnected, ConnectionResetError):
            return CLOSED  # refused mid-body: through the proxy the connection may end before the answer
    finally:
        conn.close()


async def hostile_uploads(served: Served, cache_dir=None) -> FaultRow:
    run = page_runs(cache_dir or PROJECT_ROOT / "cache").get("ablations")  # a run whose page has no k-shot table
    problems, lines = [], []
    for what, (name, data, words) in UPLOADS.items():
        seen = await _upload(served.base, run, name, data)
        errors = [a for fmt, a in seen["alerts"] if fmt == 1]
        if seen["errors"]:
            problems.append(f"{what}: {seen['errors'][0]}")
        elif words == "HTTP 413":
            if seen["http"] not in (413, CLOSED):
                problems.append(f"{what}: the server answered HTTP {seen['http']}, not 413")
            how = "413" if seen["http"] == 413 else "the connection closed before the whole file was sent"
            lines.append(f"{what}: refused by the server ({how}) before the page reads it")
        elif words is None:
            if errors or "Accuracy" not in seen["metrics"]:
                problems.append(f"{what}: not analysed ({errors[:1]})")
        elif len(errors) != 1 or words not in errors[0].replace("\\", "") or "\n" in errors[0]:
            problems.append(f"{what}: expected one line with {words!r}, got {errors}")
        else:
            lines.append(f"{what}: {errors[0].replace(chr(92), '')}")
    return FaultRow(
        fault=f"hostile uploads: {len(UPLOADS)} files on the Behaviour page",
        bound="each refused in one line with the words a student needs (or read, for the good ones); no exception",
        passed=not problems,
        measured=f"{len(UPLOADS) - len(problems)} of {len(UPLOADS)} as expected",
        student_saw='one red line, e.g. "This is an Excel workbook (.xlsx) or another zip file, not a CSV: save it '
        "from your spreadsheet as 'CSV UTF-8 (comma delimited)' and upload that file.\"; for a file over 5 MB the "
        "uploader's own line 'File must be 5.0MB or smaller.'",
        recovery="-",
        lost="nothing",
        details={"lines": lines},
        problems=problems,
    )
