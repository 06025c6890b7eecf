"""The dashboard's figures: Altair charts drawn from a run's tables, each a function that returns
(chart, data, caption). Pages and the Tour's steps share them, so a figure looks the same wherever it appears.

  style        the look every figure shares (colours, the percentage axis, frequency ticks)
  logits       logit lens, module logits, spectra, waves, Table 1 and error histograms
  numbers      how a run represents numbers: number spectra, probes, embedding spectra, t-SNE
  helix        the numbers on a helix: held-out variance by layer, the helix seen at an angle
  phase        phase locking and the phase shift
  heads        attention head by head: heads x layers heatmaps (band share, locking), one head's spectrum
  operations   the Tour's last step: one run of each operation side by side
  training     training curves and the fine-tuning stages

No module here imports Streamlit itself: a figure is built once per process for all sessions (`app.shared`) and
drawn by the page (`app.furniture.show_chart`).

Each encoding names its channel's class (`alt.Y("magnitude:Q")`, `alt.Tooltip("k")`, never `y="magnitude:Q"`): Altair
turns a bare string into its channel by hashing its whole schema, about 3 ms a string, which was most of a figure's
build (tests/test_architecture.py checks it).
"""
