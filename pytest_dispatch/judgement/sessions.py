"""An A/B job's decisions over its sessions, as a pure object: when each measurement is looked
at, and when it stops (decided, futile, or needless once its counts regressed).

The coordinator (pytest_dispatch.ab.coordinator) adds each session's verdict per measurement
and asks for a look after every session; benchmarks/futility_sim.py feeds it simulated
sessions. The statistics are pytest_dispatch.judgement.paired's, and so are the defaults
(``paired.SessionDesign``).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Collection, Sequence

from pytest_dispatch.judgement import paired
from pytest_dispatch.judgement.status import Status

# Sessions before a futility look between the looks: the predictive rule needs a spread from at
# least two differences. Simulated (benchmarks/futility_sim.py, sd 0.06), a real +10% is still
# stopped at 3 sessions about 1 time in 20 (caught 80% of the time at the cap, 84% with no futility).
FUTILITY_FROM = 3

Futility = Callable[[Sequence[paired.PairedVerdict], paired.ChangeQuestion, paired.SessionDesign], "str | None"]


@dataclasses.dataclass
class Sessions:
    """Every measurement's session verdicts (by key), and those decided so far."""

    design: paired.SessionDesign
    threshold: float
    time_count_regressions: bool = False  # keep timing a measurement whose counts regressed
    futility: Futility = paired.futility  # why a measurement's sessions to come cannot decide, or None
    verdicts: dict[str, list[paired.PairedVerdict]] = dataclasses.field(default_factory=dict)  # one per session
    overrides: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)  # the marker's, per key
    decided: dict[str, paired.PairedVerdict] = dataclasses.field(default_factory=dict)  # final verdicts

    def design_for(self, overrides: dict[str, float] | None = None) -> paired.SessionDesign:
        alpha = (overrides or {}).get("alpha")
        return self.design if alpha is None else dataclasses.replace(self.design, alpha=alpha)

    def question_for(self, overrides: dict[str, float] | None = None) -> paired.ChangeQuestion:
        return paired.ChangeQuestion((overrides or {}).get("threshold", self.threshold))

    def add(self, key: str, verdict: paired.PairedVerdict, overrides: dict[str, float] | None = None) -> None:
        """One session's verdict of a measurement (``overrides``: its marker's alpha and threshold)."""
        self.overrides[key] = overrides or {}
        self.verdicts.setdefault(key, []).append(verdict)

    @property
    def open(self) -> list[str]:
        """The measurements still taking sessions."""
        return [key for key in self.verdicts if key not in self.decided]

    def look(self, final: bool, counts_regressed: Collection[str] = ()) -> list[tuple[str, paired.PairedVerdict]]:
        """Decide every open measurement at a look (or at the cap, whatever it shows); the
        measurements decided at a look, in order.

        A change stops a measurement only when it also holds across the job's measurements
        (Benjamini-Hochberg, as at the end): among many unchanged tests, a real regression
        that stopped at its own first look would be demoted to inconclusive at the end,
        having stopped gathering the sessions that would have carried it.
        ``counts_regressed``: measurements whose counts regressed, which need no more sessions."""
        current: dict[str, paired.PairedVerdict] = {}
        due: dict[str, bool] = {}  # measurements at a look: whether it is their last
        for key in self.open:
            sessions, overrides = self.verdicts[key], self.overrides.get(key, {})
            design, question = self.design_for(overrides), self.question_for(overrides)
            current[key] = paired.judge_sessions(sessions, question, design)
            if key in counts_regressed and not self.time_count_regressions:
                self._stop(key, current.pop(key), f"counts regressed, so no timing sessions after the first "
                                                  f"{len(sessions)} (time them anyway with time_count_regressions)")
                continue
            last = final or len(sessions) >= design.max_sessions
            if last or len(sessions) in design.look_points:
                due[key] = last
            elif len(sessions) >= FUTILITY_FROM:  # stopping for futility spends no alpha: any session may
                futile = self.futility(sessions, question, design)
                if futile:
                    self._stop(key, current.pop(key), futile)
        if not due:
            return []
        adjusted = paired.adjust_family({**self.decided, **current}, self.design.alpha)
        looked = []
        for key, last in due.items():
            verdict, overrides = current[key], self.overrides.get(key, {})
            futile = None if last or adjusted[key].status != Status.INCONCLUSIVE else self.futility(
                self.verdicts[key], self.question_for(overrides), self.design_for(overrides))
            if futile:
                verdict = dataclasses.replace(verdict, status=Status.INCONCLUSIVE, reason=futile)
            if adjusted[key].status != Status.INCONCLUSIVE or last or futile:
                self.decided[key] = verdict
                looked.append((key, verdict))
        return looked

    def family(self) -> dict[str, paired.PairedVerdict]:
        """The decided verdicts adjusted across the job's measurements (Benjamini-Hochberg)."""
        return paired.adjust_family(self.decided, self.design.alpha)

    def _stop(self, key: str, verdict: paired.PairedVerdict, reason: str) -> None:
        self.decided[key] = dataclasses.replace(verdict, status=Status.INCONCLUSIVE, reason=reason)
