"""The Tour: the paper's story in steps, and the handout that carries it off screen.

  steps            the steps as data: each step's question, the tables it needs, the figures it draws
  classroom        the Tour page's classroom controls: the handout download, predict-then-reveal
  handout          the Tour as one self-contained HTML file (also a slide show)
  handout_pdf      the same handout as a PDF
  handout_style    the HTML handout's style sheet and script
  handout_export   the handout files written without the dashboard (scripts/handout.py)

Only `classroom` calls Streamlit: the steps and the handout are the same on screen, on paper and from the
command line.
"""
