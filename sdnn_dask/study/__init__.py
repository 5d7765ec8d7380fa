"""The researcher's workflow as a library: a problem, run specs, ``compare``, studies.

``load_problem`` makes or reads a network with its inputs and truth; a :class:`RunSpec`
names one configuration (strategy, partition, parts, row groups, blocks, transport, workers,
seed) and has a deterministic key; :func:`compare` runs a list of specs on one problem and
returns its records; a :class:`Study` is a YAML grid of problems and specs, run on one
cluster with a warm-up, a progress bar, and every run's records written as soon as it
finishes (:func:`sdnn_dask.records.write_run`), so an interrupted study resumes where it
stopped. The CLI (``sdnn-dask compare``, ``sdnn-dask study``) only parses arguments and
calls these.

* :mod:`.validation`: :exc:`StudyError` and the checks and messages the others share;
* :mod:`.problem`: :class:`ProblemSpec`, :class:`Problem`, :func:`load_problem`,
  :func:`load_network`;
* :mod:`.specs`: :class:`RunSpec`, its keys in the records, :func:`default_specs`;
* :mod:`.outcomes`: :class:`Records` and :class:`RunOutcome`, what runs leave;
* :mod:`.runner`: :class:`Runner`, one spec run and checked (:func:`verify`) on a cluster;
* :mod:`.comparison`: :func:`compare`, a list of specs on one problem;
* :mod:`.study`: :class:`Study`, a study file read, validated and run with resume.

Every public name is re-exported here: ``from sdnn_dask import study`` then
``study.load_problem(...)`` works in a notebook.
"""

from .comparison import compare
from .outcomes import Records, RunOutcome
from .problem import (
    DEFAULT_ROWS,
    Problem,
    ProblemSpec,
    available_layers,
    is_streamed,
    load_network,
    load_problem,
    store_weights,
)
from .runner import WARM_UP_ROWS, Runner, verify
from .specs import RunSpec, config_key, default_specs, neuron_partitions_available, run_key
from .study import (
    MAX_RUNS,
    PROBLEM_KEYS,
    RUN_KEYS,
    STUDY_KEYS,
    Study,
    check_results_folder,
    max_runs,
)
from .validation import StudyError

__all__ = [
    "DEFAULT_ROWS",
    "MAX_RUNS",
    "PROBLEM_KEYS",
    "RUN_KEYS",
    "STUDY_KEYS",
    "WARM_UP_ROWS",
    "Problem",
    "ProblemSpec",
    "Records",
    "RunOutcome",
    "RunSpec",
    "Runner",
    "Study",
    "StudyError",
    "available_layers",
    "check_results_folder",
    "compare",
    "config_key",
    "default_specs",
    "is_streamed",
    "load_network",
    "load_problem",
    "max_runs",
    "neuron_partitions_available",
    "run_key",
    "store_weights",
    "verify",
]
