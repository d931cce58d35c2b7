"""Record examples/verdicts.json on a GPU host: judge the demo's recorded replies for real.

    python examples/record_verdicts.py            # needs an NVIDIA GPU, nvcc and kevin-agent

It copies fused_gelu.py and replies.json to a scratch folder, runs

    kevin optimize fused_gelu.py::FusedGELU -m 2 -n 2 --backend scripted --script replies.json \
        --evaluator cuda --json

there (the real evaluator: compile, correctness on fresh inputs, timing against eager and
torch.compile), reads every verdict back from that run's store, and writes them to
examples/verdicts.json keyed by the marker comment of each answer ("# demo answer t1.1 ..."), in
the format ``--evaluator replay:FILE`` reads. Each verdict keeps the GPU it was measured on
(``gpu_name``) and the run it was measured in (``measured_in``), so a replay says "measured on
<GPU> in run <id>, replayed here". Each verdict also records the SHA-256 of the task's source and
of the answer's code it judged (``recorded_for``): a replay serves it for that task and code only.

    python examples/record_verdicts.py --rehash   # no GPU: the hashes again, measurements untouched

``--rehash`` recomputes those hashes from fused_gelu.py and replies.json in this folder and leaves
every recorded number as it is; run it only when a change to those files keeps the answers'
code and the task's source the same in meaning (a comment, a line ending), else record again.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kevin_agent.data import EnvironmentRecord, Verdict
from kevin_agent.evaluate.replay import BINDING_KEY, source_hash

HERE = Path(__file__).resolve().parent
MARKER = re.compile(r"^# demo answer [^\n]*$", re.MULTILINE)
TARGET = "fused_gelu.py::FusedGELU"


def marker_of(code: str) -> str:
    """The answer's marker comment (the key replay matches the candidate's code on)."""
    found = MARKER.findall(code or "")
    if len(found) != 1:
        raise SystemExit(f"record_verdicts: expected one '# demo answer' line per answer, found {found}")
    return found[0]


def verdicts_document(record: Any, command: str) -> dict[str, Any]:
    """The replay file for a stored run (``RunRecord``): by_marker -> verdict, plus what was recorded."""
    by_marker: dict[str, Verdict] = {}
    codes: dict[str, str] = {}
    for candidate, verdict in record.candidates:
        if verdict is None:
            raise SystemExit(f"record_verdicts: {candidate.id} has no verdict (run {record.run_id} is "
                             f"{record.status})")
        recorded = Verdict.from_dict(verdict.to_dict())  # a copy: the stored run stays as it is
        recorded.details.environment.measured_in = record.run_id
        recorded.details.environment.replayed = False
        recorded.details.build.log_path = None  # paths on the recording host mean nothing elsewhere
        by_marker[marker_of(candidate.code or candidate.response)] = recorded
        codes[marker_of(candidate.code or candidate.response)] = candidate.code or ""
    measured = [v.details.environment for v in by_marker.values() if v.details.environment.torch_version]
    some = measured[0] if measured else EnvironmentRecord()  # a compile error has no torch or CUDA version
    return {
        "recorded": {
            "gpu_name": record.gpu_name, "run_id": record.run_id, "class_name": record.task.class_name,
            "torch_version": some.torch_version, "cuda_version": some.cuda_version,
            "date": time.strftime("%Y-%m-%d"), "command": command,
            "note": "real verdicts, written by examples/record_verdicts.py",
        },
        "by_marker": {marker: bind(v.to_dict(), record.task.source, codes[marker])
                      for marker, v in by_marker.items()},
    }


def bind(verdict: dict[str, Any], task_source: str, code: str) -> dict[str, Any]:
    """The verdict with the hashes of the task and the code it judged (what replay checks)."""
    return {**verdict, BINDING_KEY: {"task_sha256": source_hash(task_source), "code_sha256": source_hash(code)}}


def rehash(path: Path) -> int:
    """Recompute each verdict's task and code hashes from this folder's files; numbers untouched."""
    from kevin_agent.backends.base import Completion
    from kevin_agent.parsing import parse_completion
    from kevin_agent.task import load_task

    task = load_task(f"{HERE / 'fused_gelu.py'}::FusedGELU")
    replies = json.loads((HERE / "replies.json").read_text())["responses"]
    codes = {}
    for reply in replies:
        code = parse_completion(Completion(text=reply["text"]), reply["trajectory"], reply["turn"]).code or ""
        codes[marker_of(code)] = code
    document = json.loads(path.read_text())
    missing = sorted(set(document["by_marker"]) - set(codes))
    if missing:
        print(f"record_verdicts: no reply holds {missing}; record again", file=sys.stderr)
        return 1
    document["recorded"]["class_name"] = task.class_name
    document["by_marker"] = {marker: bind(v, task.source, codes[marker]) for marker, v in document["by_marker"].items()}
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"rehashed {path}: {len(codes)} verdicts bound to {TARGET}, their numbers unchanged")
    return 0


def record(out: Path) -> int:
    from kevin_agent.store import RunStore

    args = [TARGET, "-m", "2", "-n", "2", "--backend", "scripted", "--script", "replies.json",
            "--evaluator", "cuda", "--json"]
    with tempfile.TemporaryDirectory(prefix="kevin-demo-record-") as scratch:
        folder = Path(scratch)
        for name in ("fused_gelu.py", "replies.json"):
            shutil.copy(HERE / name, folder / name)
        done = subprocess.run([sys.executable, "-m", "kevin_agent", "optimize", *args], cwd=folder,
                              stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            print(f"record_verdicts: kevin optimize exited {done.returncode}; nothing written",
                  file=sys.stderr)
            return done.returncode
        run_id = json.loads(done.stdout)["run_id"]
        with RunStore.for_path(folder) as store:
            stored = store.load_run(run_id)
    if not stored.gpu_name:
        print("record_verdicts: the verdicts name no GPU; nothing written", file=sys.stderr)
        return 1
    document = verdicts_document(stored, "kevin optimize " + " ".join(args))
    out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}: {len(document['by_marker'])} verdicts measured on {stored.gpu_name} in run {run_id}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=HERE / "verdicts.json",
                        help="where to write the replay file (default: examples/verdicts.json)")
    parser.add_argument("--rehash", action="store_true",
                        help="no GPU: recompute the task and code hashes of the file's verdicts from "
                             "fused_gelu.py and replies.json, leaving every measurement as recorded")
    args = parser.parse_args()
    return rehash(args.output) if args.rehash else record(args.output)


if __name__ == "__main__":
    sys.exit(main())
