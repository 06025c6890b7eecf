"""The analysis math: Fourier bases and spectra, phase locking, filters (ablations) on a model, number representations, behaviour and k-shot scoring."""
