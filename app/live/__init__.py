"""Live computations: an ablation the Ablations page asks for on a small local model, computed once per
distinct request for the whole machine.

  ablation   the page's side (a request, its place in the queue, its result) and the computation itself
  queue      the queue shared by every session and every dashboard process, in files
  runner     the process that computes the queue's requests under `serve` (`python -m app.live.runner`)

torch is imported only when a computation starts, so the pages load without it.
"""
