"""Child process: run a candidate's top level with load_inline replaced by a recorder.

``python -m kevin_agent.evaluate.worker.record CANDIDATE.py REPLY_FD`` writes one line
``KEVIN_LOAD_INLINE_SPECS:{"specs": [...], "error": str | null}`` to the pipe ``REPLY_FD`` its
parent opened (``build.specs.record_in_child``), never to stdout, where the candidate prints too.
The pipe is not inherited by anything started here; code in this process can still write to it,
so the parent reads a bounded amount and treats every reply as the candidate's words (what
a reply can say, a candidate's load_inline call or exception could say as well). Started with
CUDA hidden and secrets removed from the environment.
"""

from __future__ import annotations

import os
import runpy
import sys
import types
from typing import Any

from kevin_agent.evaluate.protocol import RecordReply
from kevin_agent.evaluate.source.calls import load_inline_parameter_order, spec_from_call


class _Stub(types.ModuleType):
    """Stands in for the built module so the rest of the top level keeps running."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


def main(path: str, reply_fd: int) -> int:
    from torch.utils import cpp_extension

    os.set_inheritable(reply_fd, False)
    specs: list[dict[str, Any]] = []
    order = load_inline_parameter_order()  # read torch's signature before it is replaced

    def recorder(*args: Any, **kwargs: Any) -> types.ModuleType:
        spec = spec_from_call(args, kwargs, order)
        specs.append(spec.to_dict())
        return _Stub(spec.name)

    cpp_extension.load_inline = recorder
    error = None
    try:
        runpy.run_path(path, run_name="kevin_candidate")
    except BaseException as exc:  # the candidate's own failure is reported, not raised
        error = f"{type(exc).__name__}: {exc}"[:500]
    with open(reply_fd, "w", encoding="utf-8", closefd=True) as reply:
        reply.write(RecordReply(specs, error).line() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], int(sys.argv[2])))
