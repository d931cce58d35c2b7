"""Verdicts the evaluator does not trust, one per trust check, recorded as the worker records them
today (a flag name and a reason) and as older verdicts stored them (``suspicious`` + reason only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loop_fixtures import VERDICTS, timed

from kevin_agent import feedback
from kevin_agent.data import Verdict, flag_untrusted

# flag name -> the reason the worker writes for it (each check's own wording)
REASONS = {
    "escaped_stream": ("work escapes the timed stream: 0.0040 ms measured with CUDA events but 0.3000 ms "
                       "when the whole device is synchronized before the end event (kernels launched on "
                       "another stream are not timed)"),
    "beyond_speed_of_light": ("faster than the GPU's speed of light (1.30x of it: 0.1000 ms measured, at "
                              "least 0.1300 ms possible)"),
    "implausible_speedup": "12.0x faster than PyTorch eager (over 10x is rare for real kernels)",
    "provenance_unchecked": ("provenance not checked: no kernels could be listed in the candidate's "
                             "extension"),
    "timed_below_profile": ("timed faster than the profiler saw it run: 0.0100 ms measured with CUDA events, "
                            "but one profiled call used 0.2500 ms of GPU time"),
}
FLAGGED_SPEEDUP = 5.0  # faster than every trusted fixture: any leak into a best would show


def flagged(name: str, old_style: bool = False, speedup: float = FLAGGED_SPEEDUP) -> dict[str, Any]:
    """A timed verdict whose check ``name`` fired; ``old_style``: stored before flags had names."""
    verdict = Verdict.from_dict(timed(speedup))
    if old_style:
        verdict.details.trust.suspicious = True
        verdict.details.trust.reasons = [REASONS[name]]
    else:
        flag_untrusted(verdict.details, name, REASONS[name])
    verdict.message = feedback.untrusted([REASONS[name]])
    raw = verdict.to_dict()
    if old_style:
        raw["details"]["trust"].pop("flags")  # as stored before the field existed
    return raw


TRUST_VERDICTS: dict[str, dict[str, Any]] = {
    **VERDICTS,
    **{f"flag-{name}": flagged(name) for name in REASONS},
    **{f"old-{name}": flagged(name, old_style=True) for name in REASONS},
}


def write_trust_replay(path: Path) -> Path:
    path.write_text(json.dumps({"by_marker": {f"# kevin-test: {m}": v for m, v in TRUST_VERDICTS.items()}}))
    return path
