"""Analysis: the method's math on a model's numbers and activations (docs/method.md).

Modules (each one job; the torch-free ones are marked so, the dashboard may import those):
  fourier       Fourier bases over 0..p-1, transforms, bands, spectra (torch-free)
  phase         phase locking of module outputs to the answer, wave peaks (torch-free)
  heads         attention read head by head: each head's spectrum and phase locking, band split per head
  filters       the Fourier filters: projections that remove frequencies from what W_U reads (torch-free)
  ablations     which filter on which modules: Ablation, Condition (torch-free)
  filter_hooks  filters applied to a running model through forward hooks
  evaluation    accuracy and loss under filters, many conditions per pass, with a prefix cache
  embeddings    number-embedding spectra with a permutation null model (torch-free)
  clusters      t-SNE / k-means pictures of the number embeddings (scikit-learn)
  numbers       how a model represents the numbers, layer by layer: spectra and linear probes
  helix         the numbers on a helix (Kantamneni & Tegmark): held-out fit by layer, PCA bound, shuffle, 3-D view
  behaviour     errors of answers: how far off, how often by a multiple of 10 (torch-free)
  kshot         k-shot prompting and greedy generation for digit-by-digit models
"""
