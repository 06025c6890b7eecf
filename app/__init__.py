"""The Streamlit dashboard: a thin layer over `core` and the run cache."""
