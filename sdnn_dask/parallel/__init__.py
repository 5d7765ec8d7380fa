"""Executors: serial, data, model and hybrid parallelism; one :class:`RunResult` type for all."""

from ..registry import STRATEGIES
from ..result import Agreement, RunResult, compare_outputs, network_info
from .data import DataParallelExecutor, run_block
from .exchange import RunAborted
from .faults import WorkerLostError
from .model import TRANSPORTS, ModelParallelExecutor
from .serial import SERIAL_METHODS, run_serial

__all__ = [
    "SERIAL_METHODS",
    "STRATEGIES",
    "TRANSPORTS",
    "Agreement",
    "DataParallelExecutor",
    "ModelParallelExecutor",
    "RunAborted",
    "RunResult",
    "WorkerLostError",
    "compare_outputs",
    "network_info",
    "run_block",
    "run_serial",
]
