"""The worker's side of the observation: run the calls the judge asks for, on the inputs it writes.

Runs in the candidate's process after the in-process stages passed, so nothing here is trusted:
it only makes the observation possible. Everything shared is made here and mapped by the judge
(so nothing of the judge's is ever mapped into the candidate's process): one allocation whose
first words are the fences ("go", which the judge's stream writes once it has written a batch's
inputs; "done", which this side's stream writes after the batch) and whose rest the judge writes
the input sets into. For each batch the judge sends where each call's inputs lie; this
side waits for "go" on its stream, calls the candidate once per set, waits for the device,
records "done" and sends where each call's outputs lie (they stay alive until the next batch).
torch (lazily) and the standard library only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from kevin_agent.evaluate.observe.transport import FENCES_BYTES, Transport, leaf_view
from kevin_agent.evaluate.observe.wire import (
    MAX_CALLS,
    MAX_LEAVES,
    MAX_STAGING_BYTES,
    Channel,
    ChannelError,
    expect,
    read_leaf,
    whole,
)

MESSAGE_TIMEOUT_S = 120.0


def serve(channel: Channel, transport: Transport, candidate: Callable[..., Any], inproc_ms: Optional[float]) -> str:
    """Serve the judge until it says ``bye``; "" when it did, else why the observation ended."""
    try:
        channel.send({"op": "ready", "inproc_ms": inproc_ms})
        wanted = whole(expect(channel.receive(MESSAGE_TIMEOUT_S), "staging").get("bytes"), 1, MAX_STAGING_BYTES,
                       "the staging size")
        allocation, staging_handle = transport.allocate(FENCES_BYTES + wanted)
        go, done = transport.flags(allocation, staging_handle)
        allocation[:FENCES_BYTES].zero_()
        transport.synchronize()
        staging = allocation
        channel.send({"op": "armed", "staging": staging_handle})
        kept: list[Any] = []
        while True:
            message = channel.receive(MESSAGE_TIMEOUT_S)
            if message.get("op") == "bye":
                return ""
            calls = _calls(expect(message, "run"), staging, transport, staging_handle)
            kept = []  # the last batch's outputs are released only now: the judge has read them
            kept = _run_batch(candidate, calls, transport, (go, done), message.get("copy") is True)
            channel.send({"op": "done", "outputs": [[_describe(leaf, transport) for leaf in out] for out in kept]})
    except Exception as exc:  # the candidate raised on an observed call, or sharing failed: the judge hears why
        why = str(exc) if isinstance(exc, ChannelError) else f"{type(exc).__name__}: {str(exc)[:300]}"
        try:
            channel.send({"op": "failed", "why": why})
        except ChannelError:
            pass
        return why


def _calls(message: dict[str, Any], staging: Any, transport: Transport, handle: str) -> list[list[Any]]:
    """Each call's arguments: views into the staging allocation, or plain values."""
    raw_calls = message.get("calls")
    if not isinstance(raw_calls, list) or not 0 < len(raw_calls) <= MAX_CALLS:
        raise ChannelError("a batch without calls")
    calls = []
    for raw in raw_calls:
        if not isinstance(raw, list) or len(raw) > MAX_LEAVES:
            raise ChannelError("a call's inputs are not a list")
        calls.append([leaf_view(staging, read_leaf(item["tensor"], lambda h: h == handle))
                      if isinstance(item, dict) and "tensor" in item else _value(item) for item in raw])
    return calls


def _value(item: Any) -> Any:
    if not isinstance(item, dict) or "value" not in item:
        raise ChannelError("an input that is neither a tensor nor a value")
    return item["value"]


def _run_batch(candidate: Callable[..., Any], calls: list[list[Any]], transport: Transport, fences: tuple[Any, Any],
               copy: bool) -> list[list[Any]]:
    """The batch's outputs, each call's kept apart: a candidate that returns the same (static)
    buffer every call gets a copy of each call's made right after it (``copy``, asked by the
    judge once it saw the calls share memory; the copies are on the judge's clock)."""
    import torch

    from kevin_agent.evaluate.worker.correctness import flatten_outputs

    go, done = fences
    transport.wait(go)
    outputs = []
    with torch.no_grad():
        for args in calls:
            outputs.append([(leaf.clone(memory_format=torch.contiguous_format) if copy else leaf.contiguous())
                            if isinstance(leaf, torch.Tensor) else leaf for leaf in flatten_outputs(candidate(*args))])
    transport.synchronize()  # work on other streams of this process ends before "done" too
    transport.record(done)
    return outputs


def _describe(leaf: Any, transport: Transport) -> dict[str, Any]:
    import torch

    if isinstance(leaf, torch.Tensor):
        if leaf.device.type != transport.device.type:
            raise ChannelError(f"an output on {leaf.device.type}, not on the GPU")
        return {"tensor": transport.export(leaf).to_dict()}
    if isinstance(leaf, (bool, int, float)):
        return {"value": leaf}
    raise ChannelError(f"an output of type {type(leaf).__name__}")
