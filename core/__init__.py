"""Analysis core for "Pre-trained LLMs use Fourier features to compute addition".

Data flows one way, with no import circle: tasks and models -> capture -> fourier, filters, phase ->
measure, ablation_grid -> precompute (with cache) -> claims, views; training (train, then finetune,
with the delta format in delta) sits beside the analysis and writes models; the CLI sits on top.
Nothing here imports Streamlit. Heavy modules (torch, transformers) are imported by the submodules that need them,
so `import core` and `core.runs.cache` stay cheap for the dashboard.
"""

#: Version of the cache layout. Bump it when a table's columns or meaning change; runs written
#: with another version are reported by `verify` and skipped by the dashboard.
SCHEMA_VERSION = 4  # 4: phase_locking, wave_peaks (core.analysis.phase).
# 3: number_spectrum, number_probes; digit-splitting runs (generations, not_applicable).
# 2: module_spectra_baseline, random-subspace controls, family-wise embedding null

__all__ = ["SCHEMA_VERSION"]
