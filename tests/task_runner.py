"""Run task sources in a clean interpreter: build Model(*get_init_inputs()), call forward.

Usage: python -I task_runner.py JOBS.json RESULTS.json, where JOBS maps an id to
{"source": str} or {"import_path": str}. Each result is {"shape": [...]} or {"error": str}.
Used by tests/test_task.py; runs in a scratch directory so nothing next to the original files
can be imported by accident.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
import traceback
from pathlib import Path


def run_one(module_path: Path, name: str) -> dict:
    import torch

    try:
        spec = importlib.util.spec_from_file_location(name, module_path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs()).eval()
        with torch.no_grad():
            output = model(*module.get_inputs())
        return {"shape": list(output.shape)}
    except BaseException as err:  # reported to the test, which decides
        last = traceback.format_exception_only(type(err), err)[-1].strip()
        return {"error": last}


def main() -> None:
    jobs = json.loads(Path(sys.argv[1]).read_text())
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for number, (job_id, job) in enumerate(sorted(jobs.items())):
            if "source" in job:
                path = Path(scratch) / f"task_{number}.py"
                path.write_text(job["source"])
            else:
                path = Path(job["import_path"])
            results[job_id] = run_one(path, f"kevin_task_{number}")
    Path(sys.argv[2]).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
