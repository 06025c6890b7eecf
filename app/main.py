"""Entry point: `streamlit run app/main.py` (or `bash run.sh app`)."""

import streamlit as st

from app.sidebar import sidebar
from app.state import showing

# a presentation link (large=1) opens with the sidebar folded away, so a 1024-wide projector shows the step whole
st.set_page_config(
    page_title="How language models add: Fourier features",
    page_icon="➕",
    layout="wide",
    initial_sidebar_state="collapsed" if st.query_params.get("large") == "1" else "auto",
)

# the default page is served at the root: a link to its own url_path would meet Streamlit's "Page not found", so that
# path is one no link uses, and /guided-tour, /tour and /start lead to the root
TOUR = st.Page("views/tour.py", title="Tour", icon=":material/slideshow:", url_path="tour-at-root", default=True)


def tour_link():
    """/guided-tour, /tour and /start are the Tour too (the default page itself is served at the root)."""
    st.switch_page(TOUR, query_params=dict(st.query_params))


PAGES = [
    TOUR,
    st.Page("views/logit_lens.py", title="Logit lens", icon=":material/stacked_line_chart:", url_path="logit-lens"),
    st.Page("views/spectra.py", title="Spectra", icon=":material/equalizer:", url_path="spectra"),
    st.Page("views/waves.py", title="Waves", icon=":material/waves:", url_path="waves"),
    st.Page("views/ablations.py", title="Ablations", icon=":material/filter_alt:", url_path="ablations"),
    st.Page("views/numbers.py", title="Numbers", icon=":material/scatter_plot:", url_path="embeddings"),
    st.Page("views/patching.py", title="Patching", icon=":material/swap_horiz:", url_path="patching"),
    st.Page("views/training.py", title="Training", icon=":material/school:", url_path="training"),
    st.Page("views/behaviour.py", title="Behaviour", icon=":material/rule:", url_path="behaviour"),
    st.Page("views/terms.py", title="Terms", icon=":material/menu_book:", url_path="terms"),
    st.Page(tour_link, title="Tour (guided)", url_path="guided-tour", visibility="hidden"),
    st.Page(tour_link, title="Tour (link)", url_path="tour", visibility="hidden"),
    st.Page(tour_link, title="Tour (start)", url_path="start", visibility="hidden"),
]

page = st.navigation(PAGES)
with showing(sidebar(page.url_path)):  # the sidebar's selection, handed to the page (app.sidebar.page_view)
    page.run()
