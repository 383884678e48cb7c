"""An A/B worker reads the running test's gate settings from its dispatch_budget marker itself: the
meter and the results files never carry them."""

from __future__ import annotations

import pytest

from pytest_dispatch.ab.worker import Worker


class Channel:
    def __init__(self) -> None:
        self.sent: list[dict] = []

    def send(self, message: dict) -> None:
        self.sent.append(message)

    def receive(self) -> dict:
        return {"cmd": "finish"}


class Item:
    def __init__(self, marker) -> None:
        self.marker = marker

    def get_closest_marker(self, name: str):
        return self.marker if name == "dispatch_budget" else None


@pytest.mark.parametrize(("marker", "overrides"), [
    (pytest.mark.dispatch_budget(dispatches=4, alpha=0.01, threshold="5%").mark, {"alpha": 0.01, "threshold": 0.05}),
    (pytest.mark.dispatch_budget(dispatches=4).mark, {}),
    (None, {}),
])
def test_the_worker_announces_a_measurement_with_its_tests_gate_settings(marker, overrides):
    worker = Worker(Channel(), "head")
    worker._item = Item(marker)
    assert worker.serve("test_a.py::test_a::f", {"dispatch": 4}, lambda: (1, 1, 1)) is True
    (announced,) = worker.channel.sent
    assert announced == {"event": "measure", "key": "test_a.py::test_a::f", "calls": {"dispatch": 4},
                         "overrides": overrides}


def test_the_meter_takes_no_gate_settings():
    from pytest_dispatch.measurement.meter import DispatchMeter

    with pytest.raises(TypeError):
        DispatchMeter(gate_overrides={"alpha": 0.01})
