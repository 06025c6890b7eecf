"""Analysis core for "Pre-trained LLMs use Fourier features to compute addition".

Folders show the concerns, and data flows one way (tests/test_architecture.py checks it): a
module imports only its own layer and the ones above it in this list.

  core.errors, core.files, core.paper, core.tasks, core.threads   the foundation: the task, the paper's numbers
  core.models     where a model comes from, loading it, its module names, capture hooks, vocabularies
  core.analysis   Fourier bases and spectra, phase locking, filters (ablations), numbers, behaviour
  core.training   training from scratch, fine-tuning, and the delta format a fine-tuned run ships as
  core.runs       the cache and its reader, the precompute stages that fill it, summaries, live ablations
  core.claims     each finding of the paper as a rule on a run's tables, with its verdict
  core.cli        `python -m core` (core.cli.arguments: its parser)

Nothing here imports Streamlit. The modules the dashboard reads at page load (the run reader,
summaries, claims) import no torch; the modules that compute import it at their top.
"""

#: Version of the cache layout. Bump it when a table's columns or meaning change; runs written
#: with another version are reported by `verify` and skipped by the dashboard.
SCHEMA_VERSION = 4  # 4: phase_locking, wave_peaks (core.analysis.phase).
# 3: number_spectrum, number_probes; digit-splitting runs (generations, not_applicable).
# 2: module_spectra_baseline, random-subspace controls, family-wise embedding null

__all__ = ["SCHEMA_VERSION"]
