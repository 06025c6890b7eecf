"""A student's browser session, simulated over Streamlit's own websocket protocol (loadtest.py, faults.py).

A session does what a browser does with a shared link: fetches the page (keeping the cookies it sets, as the sticky
proxy needs), opens the websocket /_stcore/stream and runs the page with the link's query string; it then changes
widgets as the browser does (protobuf BackMsg with the widget's new state), each change timed until its rerun has
finished (Streamlit's ScriptFinished message). It follows the URL as the page rewrites it (PageInfoChanged), so a
reconnect after a dropped websocket (`reconnect`, what Streamlit's page does when its server goes away) reopens the
view the student was looking at.
"""

from __future__ import annotations

import asyncio
import http.client
import http.cookies
import itertools
import random
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

#: The shared link every session opens: the Tour (the default page) at step 2, the demo's default cutoff.
LINK = "/?step=2&tau=50"
TAUS = [20, 30, 40, 60, 80, 100]
#: The proxy's sticky cookie (scripts/hall/serve.py's COOKIE)
COOKIE = "fourier_worker"


def sticky_worker(cookies: str) -> str:
    """The worker a session was kept on (the proxy's cookie), or "-" without a proxy."""
    jar = http.cookies.SimpleCookie()
    jar.load(cookies or "")
    return jar[COOKIE].value if COOKIE in jar else "-"


@dataclass
class Session:
    base: str
    rng: random.Random
    think: tuple[float, float]
    timeout: float
    #: the link the session opens (path and query string), as a student clicks it
    link: str = LINK
    #: a source address on this machine to connect from (the connection flood uses another loopback address)
    source: str | None = None
    open_s: float | None = None
    changes: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    elements: list = field(default_factory=list)
    #: every toast (one-line note) and alert (format, text) the last run showed
    toasts: list[str] = field(default_factory=list)
    alerts: list[tuple[int, str]] = field(default_factory=list)
    pages: dict = field(default_factory=dict)
    query: str = ""
    page_hash: str = ""
    cookies: str = ""
    page_name: str = ""
    session_id: str = ""
    ws: object = None

    async def run(self, until: float | None = None) -> None:
        """Open the link and make the 5 changes, `think` seconds apart. With `until` (a time.monotonic() time), keep
        going round and round after them (back to the Tour, its next step, tau, Spectra, layer, module) as long as
        the next change would come before `until`."""
        if not await self.open():
            return
        first = [self.next_step, self.change_tau, self.to_spectra, self.change_layer, self.change_module]
        again = [self.to_tour, self.step_on, self.change_tau, self.to_spectra, self.change_layer, self.change_module]
        steps = first if until is None else itertools.chain(first, itertools.cycle(again))
        try:
            for i, step in enumerate(steps):
                pause = self.rng.uniform(*self.think)
                if i >= len(first) and time.monotonic() + pause >= until:
                    return
                await asyncio.sleep(pause)
                if await self.act(step) is None:
                    return
        except Exception as exc:  # noqa: BLE001 - any failure is the session's error
            self.errors.append(f"websocket: {type(exc).__name__}: {exc}")
        finally:
            await self.close()

    async def open(self) -> bool:
        """What a browser does with the link: fetch the page (keeping its cookies), open the websocket, run the
        script with the link's query string. Sets `open_s`; False (with the error noted) when it failed."""
        t0 = time.perf_counter()
        try:
            await asyncio.to_thread(self._fetch_page)
            await asyncio.to_thread(self._health)  # as the page's script does first: it sets the XSRF cookie
        except Exception as exc:  # noqa: BLE001 - any failure is the session's error
            self.errors.append(f"page fetch: {type(exc).__name__}: {exc}")
            return False
        try:
            await self.connect()
            if not await self.until_finished("open"):
                return False
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"websocket: {type(exc).__name__}: {exc}")
            return False
        self.open_s = time.perf_counter() - t0
        return True

    async def connect(self, rerun: bool = True) -> None:
        """A websocket to the server (through the proxy, with the cookies), then a run of the current page."""
        headers = {"Cookie": self.cookies} if self.cookies else {}
        self.ws = await websockets.connect(
            self.base.replace("http", "ws", 1) + "/_stcore/stream",
            subprotocols=["streamlit"],
            origin=self.base,
            max_size=None,
            additional_headers=headers,
            open_timeout=self.timeout,
            ping_interval=None,
            close_timeout=2,
            **({"local_addr": (self.source, 0)} if self.source else {}),
        )
        self._keep_cookies(self.ws.response.headers.get_all("Set-Cookie"))
        if rerun:
            msg = BackMsg()
            msg.rerun_script.query_string = self.query
            msg.rerun_script.page_script_hash, msg.rerun_script.page_name = self.page_hash, self.page_name
            await self.ws.send(msg.SerializeToString())

    async def act(self, step) -> float | None:
        """One change (a method below that returns the BackMsg), timed until its rerun has finished."""
        msg = step()
        if msg is None:
            return None
        t = time.perf_counter()
        await self.ws.send(msg.SerializeToString())
        if not await self.until_finished(step.__name__):
            return None
        took = time.perf_counter() - t
        self.changes.append(took)
        return took

    async def reconnect(self, give_up_after: float = 60.0) -> float | None:
        """What Streamlit's page does when its websocket drops: ask the server's health every half second or so
        (through the proxy, cookies kept), then a new websocket and a run of the page it shows, with the URL it
        shows (page, query string: the new session has none of the old one's state). Seconds until that run has
        finished, or None."""
        t0 = time.perf_counter()
        wait = 0.5
        while time.perf_counter() - t0 < give_up_after:
            try:
                ok = await asyncio.to_thread(self._health)
            except Exception:  # noqa: BLE001 - the server is not back yet
                ok = False
            if ok:
                try:
                    await self.connect()
                    if await self.until_finished("reconnect"):
                        return time.perf_counter() - t0
                    return None
                except Exception:  # noqa: BLE001 - refused or dropped again: keep trying, as the page does
                    pass
            await asyncio.sleep(wait)
            wait = min(2.0, wait * 1.3)
        self.errors.append(f"reconnect: the server did not take the session back within {give_up_after:.0f} s")
        return None

    async def close(self) -> None:
        if self.ws is not None:
            try:
                await self.ws.close()
            except Exception:  # noqa: BLE001
                pass

    def _urlopen(self, url: str, **kw):
        """urllib with this session's cookies (and the proxy's sticky cookie it sets) and source address."""
        req = urllib.request.Request(url, headers={"Cookie": self.cookies} if self.cookies else {}, **kw)
        handlers = [SourceAddressHandler(self.source)] if self.source else []
        return urllib.request.build_opener(*handlers).open(req, timeout=self.timeout)

    def _fetch_page(self) -> None:
        """GET the link as a browser does, keeping the cookies it sets (the proxy's sticky one, the XSRF token)."""
        parts = urllib.parse.urlsplit(self.link)
        # the page the browser asks for is its URL's path (the Tour, the default page, is the root)
        self.query, self.page_name = parts.query, parts.path.strip("/")
        with self._urlopen(self.base + self.link) as r:
            r.read()
            self._keep_cookies(r.headers.get_all("Set-Cookie"))

    def _health(self) -> bool:
        with self._urlopen(self.base + "/_stcore/health") as r:
            self._keep_cookies(r.headers.get_all("Set-Cookie"))
            return r.status == 200

    def _keep_cookies(self, headers) -> None:
        jar = http.cookies.SimpleCookie()
        jar.load(self.cookies or "")
        for header in headers or []:
            jar.load(header)
        self.cookies = "; ".join(f"{k}={m.value}" for k, m in jar.items())

    @property
    def worker(self) -> str:
        """The worker the proxy keeps this session on (its cookie), or "-" without a proxy."""
        return sticky_worker(self.cookies)

    async def until_finished(self, what: str) -> bool:
        """Read ForwardMsgs until this run's ScriptFinished; keep the page's elements; note errors."""

        self.elements, self.toasts, self.alerts = [], [], []
        deadline = time.perf_counter() + self.timeout
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                self.errors.append(f"{what}: no answer within {self.timeout:.0f} s")
                return False
            try:
                data = await asyncio.wait_for(self.ws.recv(), left)
            except asyncio.TimeoutError:
                continue
            fwd = ForwardMsg()
            fwd.ParseFromString(data)
            kind = fwd.WhichOneof("type")
            if kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                el = fwd.delta.new_element
                etype = el.WhichOneof("type")
                if etype == "exception":
                    self.errors.append(f"{what}: exception {el.exception.type}: {el.exception.message[:200]}")
                elif etype == "alert":
                    self.alerts.append((el.alert.format, el.alert.body))
                    if el.alert.format == 1 and not self.expect_errors:  # Alert.ERROR
                        self.errors.append(f"{what}: error box: {el.alert.body[:200]}")
                elif etype == "toast":
                    self.toasts.append(el.toast.body)
                self.elements.append((etype, getattr(el, etype)))
                self.on_element(etype, getattr(el, etype))
            elif kind == "new_session":  # the page this run shows: every later rerun names it, as the browser does
                self.page_hash = fwd.new_session.page_script_hash
                self.session_id = fwd.new_session.initialize.session_id
            elif kind == "page_info_changed":  # the page wrote its controls into the URL: the browser's URL now
                self.query = fwd.page_info_changed.query_string
            elif kind == "navigation":
                self.pages = {p.url_pathname: p.page_script_hash for p in fwd.navigation.app_pages}
                if fwd.navigation.page_script_hash:  # the page this run showed: later reruns name it
                    self.page_hash = fwd.navigation.page_script_hash
            elif kind == "page_not_found":
                self.errors.append(f"{what}: page not found")
            elif kind == "script_finished":
                status = fwd.script_finished
                if status == 2:  # FINISHED_EARLY_FOR_RERUN: another run follows
                    continue
                if status == 1:  # FINISHED_WITH_COMPILE_ERROR
                    self.errors.append(f"{what}: the script did not compile")
                    return False
                return True

    async def next_message(self, kind: str, timeout: float = 30.0):
        """The next ForwardMsg of this kind (messages of a run in between are skipped)."""
        deadline = time.perf_counter() + timeout
        while (left := deadline - time.perf_counter()) > 0:
            fwd = ForwardMsg()
            fwd.ParseFromString(await asyncio.wait_for(self.ws.recv(), left))
            if fwd.WhichOneof("type") == kind:
                return getattr(fwd, kind)
        raise TimeoutError(f"no {kind} within {timeout:.0f} s")

    #: an error box is what this session expects to see (the hostile uploads): noted in `alerts`, not an error
    expect_errors = False

    def on_element(self, etype: str, el) -> None:
        """Called for every element a run sends, as it arrives (the live queue's countdown reads them)."""

    # ------------------------------------------------------------------------- the 5 changes

    def widget(self, etype: str, key: str | None = None, label: str | None = None, note: bool = True):
        """The element of that type with that key (or label) that the last run drew; None (noted) if none."""
        for t, el in self.elements:
            if t != etype:
                continue
            if key is not None and el.id.endswith(f"-{key}"):
                return el
            if label is not None and el.label == label:
                return el
        if note:
            self.errors.append(f"no {etype} {key or label!r} on the page")
        return None

    def rerun_msg(self, state=None, page: str | None = None):
        msg = BackMsg()
        rerun = msg.rerun_script
        rerun.query_string = self.query
        rerun.page_script_hash, rerun.page_name = self.page_hash, self.page_name
        if state is not None:
            rerun.widget_states.widgets.append(state)
        if page is not None:  # a click in the page menu: the browser is on that page at once, with no query string
            rerun.page_script_hash = self.page_hash = self.pages.get(page, "")
            rerun.page_name = self.page_name = page
            rerun.query_string = self.query = ""
        return msg

    @staticmethod
    def widget_state(el):
        s = WidgetState()
        s.id = el.id
        return s

    def press_button(self, label: str):
        """The rerun message of pressing the button labelled `label`; None when the page has none."""
        el = self.widget("button", label=label)
        if el is None:
            return None
        s = self.widget_state(el)
        s.trigger_value = True
        return self.rerun_msg(s)

    def next_step(self):
        return self.press_button("Next ▶")

    def step_on(self):
        """The Tour's Next, or Back from its last step."""
        el = self.widget("button", label="Next ▶", note=False)
        return self.next_step() if el is not None and not el.disabled else self.press_button("◀ Back")

    def to_tour(self):
        return self.to_page("")

    def change_tau(self):
        el = self.widget("slider", key="tau")
        if el is None:
            return None
        s = self.widget_state(el)
        s.double_array_value.data.append(float(self.rng.choice(TAUS)))
        return self.rerun_msg(s)

    def to_spectra(self):
        return self.to_page("spectra")

    def to_page(self, page: str):
        if page not in self.pages:
            self.errors.append(f"no {page} page in the navigation")
            return None
        return self.rerun_msg(page=page)

    def change_layer(self):
        el = self.widget("slider", key="layer")  # a select_slider is a Slider element too
        if el is None:
            return None
        s = self.widget_state(el)
        s.string_array_value.data.append(self.rng.choice(list(el.options)))
        return self.rerun_msg(s)

    def change_module(self):
        el = self.widget("radio", key="module")
        if el is None:
            return None
        s = self.widget_state(el)
        s.int_value = self.rng.choice([i for i in range(len(el.options)) if i != el.default] or [0])
        return self.rerun_msg(s)


class SourceAddressHandler(urllib.request.HTTPHandler):
    """HTTP from a given local address (a loopback address other than 127.0.0.1: a second machine, as the
    connection flood needs)."""

    def __init__(self, source: str):
        super().__init__()
        self.source = source

    def http_open(self, req):
        return self.do_open(
            lambda host, **kw: http.client.HTTPConnection(host, source_address=(self.source, 0), **kw), req
        )


def warm(base: str, timeout: float = 120.0) -> list[str]:
    """Open the shared link once on `base` (a worker, before the class does); the errors seen."""

    async def once():
        s = Session(base, random.Random(0), (0.0, 0.0), timeout)
        try:
            await s.open()
        finally:
            await s.close()
        return s.errors

    return asyncio.run(once())
