"""The typed requests of `memprobe scan`, `predict` and `plan`, each turned into what runs by one function that the
command line and the Python API both call: the same options give the same workloads and settings, or the same error.

Each request's fields are its options, declared once (request/option.py): the CLI's click options, the API's keyword
arguments and the checks of their values all come from those declarations. No torch here (the CLI imports this
package to read its options); what needs it is imported where it is used. Notes on how an option was read (a card
name taken as one of several, a size read as decimal GB) go to the modules' loggers at INFO: the CLI prints them as
`note: ...` lines, an API caller's logging configuration decides.
"""

from memprobe.request.checks import (
    RequestError,
    lora_rank,
    positive_size,
    precision_list,
    strategy_list,
    within,
    world_size,
)
from memprobe.request.model import MODES, SEARCHES, Model, ModelRequest, workloads_of
from memprobe.request.plan import PlanJob, PlanRequest, plan_job
from memprobe.request.predict import COMMON_CARD_SIZES, PredictJob, PredictRequest, predict_job, predict_steps
from memprobe.request.scan import ScanJob, ScanRequest, scan_job

__all__ = [
    "COMMON_CARD_SIZES",
    "MODES",
    "SEARCHES",
    "Model",
    "ModelRequest",
    "PlanJob",
    "PlanRequest",
    "PredictJob",
    "PredictRequest",
    "RequestError",
    "ScanJob",
    "ScanRequest",
    "lora_rank",
    "plan_job",
    "positive_size",
    "precision_list",
    "predict_job",
    "predict_steps",
    "scan_job",
    "strategy_list",
    "within",
    "workloads_of",
    "world_size",
]
