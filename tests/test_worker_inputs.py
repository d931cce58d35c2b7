"""The worker makes a task's inputs on the evaluation device (issue 20: a 16M-element input set
made on the host cost the correctness stage ~1 s on the H200), and falls back to the host for
tasks whose ``get_inputs`` only works there. The ``meta`` device stands in for the GPU here."""

from __future__ import annotations

from typing import Any

import torch

from kevin_agent.evaluate.worker.correctness import make_inputs


def test_factory_calls_make_tensors_on_the_device_itself() -> None:
    made_on: list[torch.device] = []

    def get_inputs() -> list[Any]:
        a = torch.randn(1024, 1024)
        made_on.append(a.device)
        return [a, torch.randint(0, 10, (8,)), 3]

    inputs = make_inputs(get_inputs, torch.device("meta"))
    assert made_on == [torch.device("meta")]  # made there, not on the host and then moved
    assert [t.device.type for t in inputs[:2]] == ["meta", "meta"]
    assert inputs[2] == 3


def test_a_task_that_only_works_on_the_host_is_made_there_and_moved() -> None:
    calls: list[torch.device] = []

    def get_inputs() -> list[Any]:
        a = torch.randn(4, 4)
        calls.append(a.device)
        return [torch.from_numpy(a.numpy() * 2)]  # .numpy() fails on any device but the host

    inputs = make_inputs(get_inputs, torch.device("meta"))
    assert calls == [torch.device("meta"), torch.device("cpu")]
    assert inputs[0].device.type == "meta"


def test_the_same_seed_gives_the_same_inputs() -> None:
    def get_inputs() -> list[Any]:
        return [torch.randn(64), {"x": torch.rand(3, 3)}]

    torch.manual_seed(7)
    first = make_inputs(get_inputs, torch.device("cpu"))
    torch.manual_seed(7)
    second = make_inputs(get_inputs, torch.device("cpu"))
    assert torch.equal(first[0], second[0]) and torch.equal(first[1]["x"], second[1]["x"])
