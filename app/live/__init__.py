"""Live computations: an ablation the Ablations page asks for on a small local model, computed once per
distinct request for the whole machine.

  ablation   the page's side (a request, its place in the queue, its result) and the computation itself
  queue      the queue shared by every session and every dashboard process, in files
  runner     the process that computes the queue's requests under `serve` (`python -m app.live.runner`)
  rebuild    rebuilding a delta-only model's weights from the page: one at a time on the machine, in the background
  rebuild_runner  the process that rebuilds (`python -m app.live.rebuild_runner FOLDER`), reporting its stages

torch is imported only when a computation or a rebuild starts, so the pages load without it.
"""
