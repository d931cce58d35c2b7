"""``python -m kevin_agent.evaluate.sandbox.attack_run FILE``: run an ``attacks.attack_script``
file. The launcher's module mode runs it in a child that may not execute programs (the record
and worker policies); a compile child runs it as ``python FILE`` or through this module alike."""

from __future__ import annotations

import runpy
import sys

if __name__ == "__main__":
    runpy.run_path(sys.argv[1], run_name="__main__")
