"""The seconds a run took, over every part it was made in: a precompute interrupted (Ctrl-C, a killed job) and
resumed from its staging folder times each part, and the manifest's `timings` are their sums, not the last part's
alone.

`StageTimings` is the `timings` dict of one part: each stage's seconds set on it are added to what the earlier parts
recorded for that stage (`TIMINGS_FILE` in the staging folder) and written there at once, so an interruption loses
only the part of the stage it stopped in. Seconds (keys ending "_s") are summed; anything else (the threads) is the
last part's; `parts` counts the parts.
"""

from __future__ import annotations

#: The staging folder's record of the seconds of the parts so far (a working file: never published).
TIMINGS_FILE = "timings.json"


class StageTimings(dict):
    """{stage_s: seconds over every part of the run so far, ..., "parts": n} (module docstring)."""

    def __init__(self, writer):
        super().__init__()
        self.writer = writer
        earlier = writer.read_json(TIMINGS_FILE)
        self.earlier = earlier if isinstance(earlier, dict) else {}
        super().__setitem__("parts", int(self.earlier.get("parts", 0) or 0) + 1)
        self.save()

    def __setitem__(self, key: str, value) -> None:
        if key.endswith("_s") and isinstance(self.earlier.get(key), (int, float)):
            value = round(float(self.earlier[key]) + float(value), 2)
        super().__setitem__(key, value)
        self.save()

    def update(self, other=(), **more) -> None:
        for key, value in {**dict(other), **more}.items():
            self[key] = value

    def save(self) -> None:
        """The sums so far, for a later part to add to (every key an earlier part set, this part's over them)."""
        self.writer.write_json(TIMINGS_FILE, {**self.earlier, **self})
