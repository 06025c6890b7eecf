"""Eval mode for the length of a pass, the caller's training flags restored after it.

Every forward pass of the analysis (captures, evaluations, the layout check, generation) runs in eval mode, so
dropout is off and the numbers are the model's own. A model handed in from memory (`core.models.loading.wrap_model`)
may be one its owner is training: `evaluating` puts it in eval mode while a pass runs and then gives every module back
the `training` flag it had, so the caller's model is left as it was found. Passes may nest or overlap (threads of the
dashboard on one model): the flags are read when the first one starts and restored when the last one ends.
"""

from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager

_LOCK = threading.Lock()
#: model -> [passes running, {module: its training flag before the first of them}]
_RUNNING: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@contextmanager
def evaluating(model):
    """`model` (an `nn.Module`) in eval mode inside the block; every module's own `training` flag is restored after."""
    with _LOCK:
        entry = _RUNNING.get(model)
        if entry is None:
            entry = _RUNNING[model] = [0, {m: m.training for m in model.modules()}]
            model.eval()
        entry[0] += 1
    try:
        yield model
    finally:
        with _LOCK:
            entry[0] -= 1
            if entry[0] == 0:
                del _RUNNING[model]
                for module, flag in entry[1].items():
                    module.training = flag
