"""Terms: every word the dashboard uses, in plain language (the Tour shows each step's terms beside it), and
what each verdict badge means."""

import streamlit as st

from app.furniture import BADGE, intro
from app.glossary import TERMS
from core.claims.base import VERDICT_MEANINGS

intro(
    "Terms: the words on these pages",
    "Each term in plain words; docs/method.md in the project gives the full definitions. The Tour shows the terms a "
    "step uses beside it.",
)
for name, text in sorted(TERMS.items(), key=lambda kv: kv[0].lower()):
    st.markdown(f"**{name}**: {text}")
st.subheader("Verdicts")
st.caption("Every Tour step and page sets the paper's finding beside the run's measurement with one of these badges.")
for verdict, meaning in VERDICT_MEANINGS.items():
    st.markdown(f"{BADGE[verdict]} &nbsp; {meaning}")
