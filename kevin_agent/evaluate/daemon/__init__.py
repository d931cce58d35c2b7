"""The warm evaluator: a background process that keeps one evaluator's workers started between
``kevin eval`` calls, so a repeated evaluation pays for its GPU stages, not for Python, torch,
CUDA and worker starts.

The first ``kevin eval`` on a GPU evaluates in its own process, then starts one for its settings
(``client.start_daemon``); later calls with the same settings, environment, repository and
kevin-agent code hand their task and candidate over a Unix socket in a private folder of the
build cache (``address``) and print the verdict it sends back (``server``). It exits after
``KEVIN_EVAL_DAEMON_IDLE_S`` seconds without a request (default 300; 0: never started).
Standard library only at module level.
"""

from kevin_agent.evaluate.daemon.address import DaemonAddress, daemon_address, idle_seconds
from kevin_agent.evaluate.daemon.client import evaluate_on_daemon, start_daemon, stop_daemons

__all__ = ["DaemonAddress", "daemon_address", "evaluate_on_daemon", "idle_seconds", "start_daemon", "stop_daemons"]
