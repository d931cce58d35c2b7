"""Turning ``kevin optimize`` flags into a ready Session (new run or resumed run)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from kevin_agent.errors import UserInputError
from kevin_agent.events import EventSink
from kevin_agent.store import RunStore

# flag attribute -> BackendSettings field
BACKEND_FLAGS = {
    "backend": "backend",
    "base_url": "base_url",
    "model": "model",
    "script": "script",
    "max_tokens": "max_tokens",
    "temperature": "temperature",
}


@dataclass
class Prepared:
    session: Any  # session.Session
    evaluator: Any
    resumed: bool


def _backend_flags(args: argparse.Namespace) -> dict[str, Any]:
    flags = {field: getattr(args, attr, None) for attr, field in BACKEND_FLAGS.items()}
    if flags.get("script"):
        flags["script"] = str(Path(flags["script"]).expanduser().resolve())
    return flags


def _resolve_backend(flags: dict[str, Any]) -> Any:
    from kevin_agent.config import load_config, resolve_backend_settings

    return resolve_backend_settings(flags, os.environ, load_config(None))


def _open_evaluator(spec: Optional[str], settings: Any) -> Any:
    from kevin_agent.evaluate.evaluator import open_evaluator

    return open_evaluator(spec, settings.eval)


def prepare(args: argparse.Namespace, store: RunStore, events: EventSink) -> Prepared:
    """Build the backend, evaluator and Session the flags ask for; UserInputError on bad input."""
    from kevin_agent.backends import make_backend
    from kevin_agent.loop.session import RunSettings, Session, resume

    flags = _backend_flags(args)
    if args.resume:
        if args.target:
            raise UserInputError("give either FILE.py::Class or --resume RUN, not both")
        record = store.load_run(args.resume)
        if record.status == "done":
            raise UserInputError(f"run {record.run_id} is already done; `kevin show {record.run_id}`")
        stored = RunSettings.from_dict(record.settings)
        given = {k: v for k, v in flags.items() if v is not None}
        backend_settings = _resolve_backend({**record.settings.get("backend", {}), **given})
        spec = args.evaluator or stored.evaluator
        backend = make_backend(backend_settings)
        evaluator = _open_evaluator(spec, stored)
        session = resume(record.run_id, store, backend, evaluator, events)
        session.settings.backend = backend_settings
        return Prepared(session, evaluator, resumed=True)
    if not args.target:
        raise UserInputError("name a module to optimize: kevin optimize FILE.py::Class "
                             "(or continue a run with --resume RUN)")
    from kevin_agent.task import load_task

    task = load_task(args.target)
    backend_settings = _resolve_backend(flags)
    settings = RunSettings(
        trajectories=args.trajectories, turns=args.turns, target_speedup=args.target_speedup,
        beam_keep=args.beam, beam_every=args.beam_every, backend=backend_settings,
        gpu_name=args.gpu, evaluator=args.evaluator,
    )
    settings.validate()
    backend = make_backend(backend_settings)
    evaluator = _open_evaluator(args.evaluator, settings)
    session = Session(task, settings, backend, evaluator, store, events)
    return Prepared(session, evaluator, resumed=False)
