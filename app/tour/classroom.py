"""The Tour's classroom controls: the handout download (the Tour as HTML and PDF files, app/tour/handout.py) and
predict-then-reveal (in presentation mode, a step first asks the class, and shows this run's measurement,
verdict and figure only when the lecturer presses Reveal)."""

from __future__ import annotations

import streamlit as st

from app.run_loading import run_claims, training_claim
from app.state import large
from app.tour.handout import build_handout, handout_html
from app.tour.handout_pdf import handout_pdf
from app.tour.steps import Step
from core.claims.base import Claim
from core.claims.registry import PAPER_SHORT
from core.runs.reader import RunReader

#: session_state key of the steps revealed so far, as (run, step, best) triples
REVEALED = "revealed_steps"


@st.cache_data(show_spinner=False, max_entries=16)
def handout_files(cache: str, name: str, created: str, basis: str, best: bool, _chosen, _runs) -> tuple[str, bytes]:
    """(HTML, PDF) of the handout, once per run version and choice, for every session."""
    handout = build_handout(_chosen, _runs, run_claims, training_claim, basis=basis, best=best)
    return handout_html(handout), handout_pdf(handout)


def handout_button(chosen: RunReader, runs: list[RunReader], basis: str, best: bool) -> None:
    """A Handout popover with the whole Tour for this run as one HTML file (opens with no network; doubles as
    slides) and as a PDF; the files are made when one is clicked (a few seconds)."""

    def files() -> tuple[str, bytes]:
        return handout_files(chosen.cache_dir, chosen.name, chosen.created, basis, best, chosen, runs)

    with st.popover("Handout", icon=":material/description:", width="stretch"):
        st.caption(
            "Every step of this Tour for this run, with its figures: an HTML file that opens with no network (its "
            "Slides button shows one step a screen) and a PDF to print. The same as `scripts/handout.py`."
        )
        st.download_button(
            "Handout as HTML (and slides)",
            lambda: files()[0],
            f"handout-{chosen.name}.html",
            "text/html",
            key="handout-html",
            on_click="ignore",
        )
        st.download_button(
            "Handout as PDF",
            lambda: files()[1],
            f"handout-{chosen.name}.pdf",
            "application/pdf",
            key="handout-pdf",
            on_click="ignore",
        )


def reveal(key: tuple) -> None:
    st.session_state.setdefault(REVEALED, set()).add(key)


def reveal_mode() -> bool:
    """Predict-then-reveal is on: its switch (drawn in presentation mode only) and presentation mode."""
    return bool(st.session_state.get("reveal")) and large()


def reveal_switch() -> None:
    """The switch, in presentation mode."""
    if large():
        st.toggle(
            "Predict, then reveal",
            key="reveal",
            help="Each step first asks the class, with the paper's finding; this run's measurement, verdict and "
            "figure appear when you press Reveal.",
        )


def waiting(step: Step, shown: RunReader, best: bool) -> bool:
    """Whether this step's measurement, verdict and figure are still hidden (predict-then-reveal, not yet revealed)."""
    return reveal_mode() and (shown.name, step.key, best) not in st.session_state.get(REVEALED, set())


def ask_first(step: Step, shown: RunReader, claim: Claim, best: bool) -> None:
    """The paper's finding, the class's choices and the Reveal button, in place of the measurement."""
    st.markdown(f"**The paper:** {claim.paper_short or PAPER_SHORT.get(claim.step, claim.paper)}")
    st.radio(
        f"**Predict first:** {step.predict}",
        step.choices,
        index=None,
        key=f"predict-{step.key}",
        help="Ask the class, and mark the answer most chose: it stays beside the measurement once revealed.",
    )
    key = (shown.name, step.key, best)
    st.button("Reveal this run's measurement", type="primary", on_click=reveal, args=(key,), key="reveal-button")


def prediction_note(step: Step) -> None:
    """The class's prediction beside the revealed measurement (when one was marked)."""
    choice = st.session_state.get(f"predict-{step.key}")
    if reveal_mode() and choice:
        st.caption(f"The class predicted: **{choice}**. {step.predict}")
