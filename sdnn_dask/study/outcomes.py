"""What runs leave behind: :class:`Records` (the run and layer records of a set of runs) and
:class:`RunOutcome` (one finished run)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..core.result import RunResult
from .specs import RunSpec


@dataclass
class Records:
    """The run and layer records of a set of runs (:mod:`sdnn_dask.records`' schema)."""

    runs: pd.DataFrame
    layers: pd.DataFrame

    @property
    def failed(self) -> pd.DataFrame:
        """One row per run whose check is not PASS."""
        per_run = self.runs.drop_duplicates("run_id")
        return per_run[per_run["check"] != "PASS"]

    def comparison(self) -> pd.DataFrame:
        """Median over repeats of each configuration
        (:func:`sdnn_dask.report.tables.comparison`)."""
        from ..report.tables import comparison

        return comparison(self.runs)


@dataclass
class RunOutcome:
    """One finished run: its result, verdict and records."""

    spec: RunSpec
    result: RunResult
    check: str
    records: Records
