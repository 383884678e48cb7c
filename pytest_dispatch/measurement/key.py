"""The one name of a measurement across runs, files and A/B sides: ``nodeid::name``."""

from __future__ import annotations

import dataclasses
from urllib.parse import unquote


@dataclasses.dataclass(frozen=True, order=True)
class MeasurementKey:
    """A test's node id and the measurement's name within it.

    ``str()`` is ``nodeid::name``; in the name a ``%`` is written ``%25`` and a ``::``
    ``%3A%3A``, so ``parse`` finds where the node id ends whatever the name holds."""

    nodeid: str
    name: str

    def __str__(self) -> str:
        return f"{self.nodeid}::{self.name.replace('%', '%25').replace('::', '%3A%3A')}"

    @classmethod
    def parse(cls, text: str) -> "MeasurementKey":
        """The key that ``str()`` wrote; ValueError for text without ``::``."""
        split = text.rfind("::")
        if split < 0:
            raise ValueError(f"{text!r} is not a measurement key (nodeid::name)")
        while split > 0 and text[split - 1] == ":":  # a name that starts with ':'; a node id never ends with one
            split -= 1
        return cls(text[:split], unquote(text[split + 2:]))
