"""``python -m kevin_agent.evaluate.worker``: one GPU worker process (see ``main``)."""

import os
import sys

from kevin_agent.evaluate.worker.main import main

if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown: candidate extensions' destructors may hang or crash
