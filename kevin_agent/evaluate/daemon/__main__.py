"""``python -m kevin_agent.evaluate.daemon --folder DIR --key KEY --settings JSON --idle S``:
a warm evaluator (started by ``kevin eval``, never by hand)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Optional

from kevin_agent.evaluate.api import EvalSettings
from kevin_agent.evaluate.daemon.address import DaemonAddress
from kevin_agent.evaluate.daemon.server import serve


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kevin_agent.evaluate.daemon")
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--settings", required=True, help="EvalSettings as JSON")
    parser.add_argument("--idle", type=float, required=True, help="seconds to wait for a request")
    args = parser.parse_args(argv)
    settings = EvalSettings.from_dict(json.loads(args.settings), unknown="refuse")  # both ends: this code
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped: close the workers, remove the socket
    return serve(DaemonAddress(args.folder, args.key), settings, args.idle)


if __name__ == "__main__":
    sys.exit(main())
