"""The Streamlit dashboard: a thin layer over `core` and the run cache.

Folders show the concerns, and imports run one way (tests/test_architecture.py checks it): a module imports
its own layer and the layers below it in this list, never a layer above it nor the other folder of its own row.

  app.guards                a link's values, an upload, text and CSV cells from outside, checked before use
  app (its own modules)     the furniture every page shares: state (the view of one rerun), shared (figures
                            built once for all sessions), run_loading, glossary, furniture (the
                            page parts, `show_chart` with its downloads), sidebar
  app.figures, app.live     Altair figures of a run's tables; live computations and their queue
  app.tour                  the Tour's steps as data, its classroom controls, the handout (HTML and PDF)
  app.views                 the pages (Streamlit runs each file; main.py lists them)
  app.main, app.launch      the entry point (`streamlit run app/main.py`); starting the dashboard from outside
                            (a free port, health checks, a real browser) for the tests and scripts

No module of app.figures and none of app.tour but its classroom controls imports Streamlit: a figure or a step
is the same on screen, in the handout and from the command line. `core` never imports `app`.
"""
