"""Executors: serial, data, model and hybrid parallelism; one :class:`RunResult` type for all."""

from ..core.result import Agreement, RunResult, compare_outputs, network_info
from ..registry import STRATEGIES
from .blocks import run_block
from .data_executor import DataParallelExecutor
from .faults import WorkerLostError
from .model_executor import TRANSPORTS, ModelParallelExecutor
from .serial import SERIAL_METHODS, run_serial
from .transport.exchange import RunAborted

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
