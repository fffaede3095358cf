"""xder-methods: continual learners, the replay buffer and the class-incremental training loop.

Methods register by name (:func:`create_method`); each is one module with a frozen config
dataclass whose defaults are the paper's values. The package imports only torch (GEM loads its QP
solver, quadprog, when it first projects): backbones and data reach it through the protocols in
:mod:`xder_methods.core.protocols`.
"""

from xder_methods import methods as _methods  # noqa: F401  (registers every method)
from xder_methods.core.base import MethodBase
from xder_methods.core.errors import (
    MethodConfigError,
    MethodError,
    NonFiniteLossError,
    UnknownMethodError,
    check_settings,
)
from xder_methods.core.evaluation import EpochRecord, Evaluation, History, TaskRecord, evaluate
from xder_methods.core.graphs import CudaGraphs, ReplayCheck, StepGraphs, StepNotReplayable, StepResult
from xder_methods.core.loop import (
    CHECKPOINT_FORMAT,
    Callback,
    FitState,
    apply_step,
    fit,
    make_optimizer,
    run_epoch,
    run_step,
    train_step,
)
from xder_methods.core.profiling import OpCounter, is_host_sync, is_view
from xder_methods.core.protocols import (
    Backbone,
    Batch,
    ContinualMethod,
    ContinualSetting,
    StepOutput,
    TaskData,
    TaskStream,
    Transform,
    Transforms,
)
from xder_methods.core.registry import (
    check_schedule,
    create_method,
    list_methods,
    method_class,
    method_config_class,
    register_method,
)
from xder_methods.core.schedule import (
    PROTOCOL_METHOD_FIELDS,
    TrainingProtocol,
    TrainingSchedule,
    autocast,
    batch_bounds,
    begin_step,
    check_protocol_fields,
    learning_rate,
    protocol_fields,
    protocol_values,
    shuffled_batches,
)
from xder_methods.core.threads import CpuShare, MachineLoad, ThreadPolicy, fair_threads, machine_cores
from xder_methods.methods.agem import AGEM, AGEMConfig, project_agem
from xder_methods.methods.bic import BiC, BiCConfig
from xder_methods.methods.der import DER, DERConfig
from xder_methods.methods.derpp import DERpp, DERppConfig
from xder_methods.methods.derpp_ace import DERppACE, DERppACEConfig
from xder_methods.methods.er import ER
from xder_methods.methods.er_ace import ERACE, ERACEConfig
from xder_methods.methods.ewc_on import OnlineEWC, OnlineEWCConfig, ewc_penalty, fisher_diagonal
from xder_methods.methods.fdr import FDR, FDRConfig, function_distance
from xder_methods.methods.flatness import ERFlat, ERFlatConfig, local_flatness, local_linearity
from xder_methods.methods.gdumb import GDumb, GDumbConfig
from xder_methods.methods.gem import GEM, GEMConfig, project_gem
from xder_methods.methods.gss import GSS, GSSConfig, gss_replacement, gss_scores
from xder_methods.methods.hal import HAL, HALConfig, anchor_loss, anchor_objective
from xder_methods.methods.icarl import ICaRL, ICaRLConfig
from xder_methods.methods.joint import Joint, JointConfig
from xder_methods.methods.lucir import LUCIR, LUCIRConfig
from xder_methods.methods.lwf import LwF, LwFConfig, distillation_loss
from xder_methods.methods.lwf_mc import LwFMC, LwFMCConfig
from xder_methods.methods.rpc import RPC, RPCConfig
from xder_methods.methods.sgd import FineTuning, FineTuningConfig
from xder_methods.methods.si import SI, SIConfig, si_importance, si_penalty
from xder_methods.methods.xder import XDER, XDERConfig
from xder_methods.parts.buffer import Buffer, BufferSample, reservoir_slots
from xder_methods.parts.heads import CosineHead, regular_simplex
from xder_methods.parts.networks import frozen_batchnorm_stats
from xder_methods.parts.replay import DarkReplayConfig, ReplayConfig, forward_parts

__all__ = [
    "AGEM",
    "CHECKPOINT_FORMAT",
    "DER",
    "ER",
    "ERACE",
    "FDR",
    "GEM",
    "GSS",
    "HAL",
    "LUCIR",
    "PROTOCOL_METHOD_FIELDS",
    "RPC",
    "SI",
    "XDER",
    "AGEMConfig",
    "Backbone",
    "Batch",
    "BiC",
    "BiCConfig",
    "Buffer",
    "BufferSample",
    "Callback",
    "ContinualMethod",
    "ContinualSetting",
    "CosineHead",
    "CpuShare",
    "CudaGraphs",
    "DERConfig",
    "DERpp",
    "DERppACE",
    "DERppACEConfig",
    "DERppConfig",
    "DarkReplayConfig",
    "ERACEConfig",
    "ERFlat",
    "ERFlatConfig",
    "EpochRecord",
    "Evaluation",
    "FDRConfig",
    "FineTuning",
    "FineTuningConfig",
    "FitState",
    "GDumb",
    "GDumbConfig",
    "GEMConfig",
    "GSSConfig",
    "HALConfig",
    "History",
    "ICaRL",
    "ICaRLConfig",
    "Joint",
    "JointConfig",
    "LUCIRConfig",
    "LwF",
    "LwFConfig",
    "LwFMC",
    "LwFMCConfig",
    "MachineLoad",
    "MethodBase",
    "MethodConfigError",
    "MethodError",
    "NonFiniteLossError",
    "OnlineEWC",
    "OnlineEWCConfig",
    "OpCounter",
    "RPCConfig",
    "ReplayCheck",
    "ReplayConfig",
    "SIConfig",
    "StepGraphs",
    "StepNotReplayable",
    "StepOutput",
    "StepResult",
    "TaskData",
    "TaskRecord",
    "TaskStream",
    "ThreadPolicy",
    "TrainingProtocol",
    "TrainingSchedule",
    "Transform",
    "Transforms",
    "UnknownMethodError",
    "XDERConfig",
    "anchor_loss",
    "anchor_objective",
    "apply_step",
    "autocast",
    "batch_bounds",
    "begin_step",
    "check_protocol_fields",
    "check_schedule",
    "check_settings",
    "create_method",
    "distillation_loss",
    "evaluate",
    "ewc_penalty",
    "fair_threads",
    "fisher_diagonal",
    "fit",
    "forward_parts",
    "frozen_batchnorm_stats",
    "function_distance",
    "gss_replacement",
    "gss_scores",
    "is_host_sync",
    "is_view",
    "learning_rate",
    "list_methods",
    "local_flatness",
    "local_linearity",
    "machine_cores",
    "make_optimizer",
    "method_class",
    "method_config_class",
    "project_agem",
    "project_gem",
    "protocol_fields",
    "protocol_values",
    "register_method",
    "regular_simplex",
    "reservoir_slots",
    "run_epoch",
    "run_step",
    "shuffled_batches",
    "si_importance",
    "si_penalty",
    "train_step",
]
