"""Terms: every word the dashboard uses, in plain language (the Tour shows each step's terms beside it)."""

import streamlit as st

from app.furniture import intro
from app.glossary import TERMS

intro(
    "Terms: the words on these pages",
    "Each term in plain words; docs/method.md in the project gives the full definitions. The Tour shows the terms a "
    "step uses beside it.",
)
for name, text in sorted(TERMS.items(), key=lambda kv: kv[0].lower()):
    st.markdown(f"**{name}**: {text}")
