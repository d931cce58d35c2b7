"""Child of ``check_sandbox``: confine (unless ``--mode off``), try every attack, print the results.

``python -m kevin_agent.evaluate.sandbox.check_child --mode auto --policy JSON --targets JSON``
prints one line ``KEVIN_SANDBOX_CHECK:{"report": ..., "results": {name: {"ok": bool, "error": str}}}``.
With ``--launched`` it confines nothing itself: the launcher (``launch -m``) already did, in its
namespaces, as for every real child, and the report is the launcher's layer.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback

from kevin_agent.evaluate.sandbox.attacks import LEGIT, PRELUDE
from kevin_agent.evaluate.sandbox.attacks import SELF_CHECK_ATTACKS as ATTACKS
from kevin_agent.evaluate.sandbox.enforce import SandboxUnavailable, confine, current_report
from kevin_agent.evaluate.sandbox.policy import SandboxPolicy

MARKER = "KEVIN_SANDBOX_CHECK:"


def _try(code: str, namespace: dict) -> dict:
    try:
        exec(code, namespace)
    except BaseException as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"ok": True, "error": ""}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="auto")
    parser.add_argument("--policy", required=True)
    parser.add_argument("--targets", required=True)
    parser.add_argument("--launched", action="store_true", help="already confined by the launcher")
    args = parser.parse_args(argv)
    try:
        report = current_report() if args.launched else confine(SandboxPolicy.from_json(args.policy), args.mode)
    except SandboxUnavailable as exc:
        print(MARKER + json.dumps({"report": None, "error": str(exc), "results": {}}), flush=True)
        return 0
    if report is None:
        print(MARKER + json.dumps({"report": None, "error": "no launcher confined this child", "results": {}}),
              flush=True)
        return 0
    namespace: dict = {"T": json.loads(args.targets), "__name__": "kevin_candidate"}
    exec(PRELUDE, namespace)
    results = {}
    ordered = [a for a in LEGIT + ATTACKS if not a.last] + [a for a in ATTACKS if a.last]
    for attack in ordered:
        results[attack.name] = _try(attack.code, namespace)
    print(MARKER + json.dumps({"report": report.to_dict(), "results": results}), flush=True)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
