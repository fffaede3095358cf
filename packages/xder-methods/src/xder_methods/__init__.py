"""xder-methods: continual learners, the replay buffer and the class-incremental training loop.

Methods register by name (:func:`create_method`); each is one module with a frozen config
dataclass whose defaults are the paper's values. The package imports only torch (GEM loads its QP
solver, quadprog, when it first projects): backbones and data reach it through the protocols in
:mod:`xder_methods.protocols`.
"""

from xder_methods import agem as _agem  # noqa: F401  (registers agem)
from xder_methods import bic as _bic  # noqa: F401  (registers bic)
from xder_methods import der as _der  # noqa: F401  (registers der)
from xder_methods import derpp as _derpp  # noqa: F401  (registers derpp)
from xder_methods import derpp_ace as _derpp_ace  # noqa: F401  (registers derpp_ace)
from xder_methods import er as _er  # noqa: F401  (registers er)
from xder_methods import er_ace as _er_ace  # noqa: F401  (registers er_ace)
from xder_methods import ewc_on as _ewc_on  # noqa: F401  (registers ewc_on)
from xder_methods import fdr as _fdr  # noqa: F401  (registers fdr)
from xder_methods import flatness as _flatness  # noqa: F401  (registers er_flat)
from xder_methods import gdumb as _gdumb  # noqa: F401  (registers gdumb)
from xder_methods import gem as _gem  # noqa: F401  (registers gem)
from xder_methods import gss as _gss  # noqa: F401  (registers gss)
from xder_methods import hal as _hal  # noqa: F401  (registers hal)
from xder_methods import icarl as _icarl  # noqa: F401  (registers icarl)
from xder_methods import joint as _joint  # noqa: F401  (registers joint)
from xder_methods import lucir as _lucir  # noqa: F401  (registers lucir)
from xder_methods import lwf as _lwf  # noqa: F401  (registers lwf)
from xder_methods import lwf_mc as _lwf_mc  # noqa: F401  (registers lwf_mc)
from xder_methods import rpc as _rpc  # noqa: F401  (registers rpc)
from xder_methods import sgd as _sgd  # noqa: F401  (registers sgd)
from xder_methods import si as _si  # noqa: F401  (registers si)
from xder_methods import xder as _xder  # noqa: F401  (registers xder)
from xder_methods._registry import (
    check_schedule,
    create_method,
    list_methods,
    method_class,
    method_config_class,
    register_method,
)
from xder_methods.agem import AGEM, AGEMConfig, project_agem
from xder_methods.base import MethodBase, frozen_batchnorm_stats
from xder_methods.bic import BiC, BiCConfig
from xder_methods.buffer import Buffer, BufferSample, reservoir_slots
from xder_methods.der import DER, DERConfig
from xder_methods.derpp import DERpp, DERppConfig
from xder_methods.derpp_ace import DERppACE, DERppACEConfig
from xder_methods.er import ER, DarkReplayConfig, ReplayConfig, forward_parts
from xder_methods.er_ace import ERACE, ERACEConfig
from xder_methods.errors import (
    MethodConfigError,
    MethodError,
    NonFiniteLossError,
    UnknownMethodError,
    check_settings,
)
from xder_methods.ewc_on import OnlineEWC, OnlineEWCConfig, ewc_penalty, fisher_diagonal
from xder_methods.fdr import FDR, FDRConfig, function_distance
from xder_methods.flatness import ERFlat, ERFlatConfig, local_flatness, local_linearity
from xder_methods.gdumb import GDumb, GDumbConfig
from xder_methods.gem import GEM, GEMConfig, project_gem
from xder_methods.graphs import CudaGraphs, ReplayCheck, StepGraphs, StepNotReplayable, StepResult
from xder_methods.gss import GSS, GSSConfig, gss_replacement, gss_scores
from xder_methods.hal import HAL, HALConfig, anchor_loss, anchor_objective
from xder_methods.heads import CosineHead, regular_simplex
from xder_methods.icarl import ICaRL, ICaRLConfig
from xder_methods.joint import Joint, JointConfig
from xder_methods.loop import (
    CHECKPOINT_FORMAT,
    Callback,
    EpochRecord,
    Evaluation,
    History,
    Loop,
    TaskRecord,
    TrainingSchedule,
    apply_step,
    autocast,
    batch_bounds,
    begin_step,
    evaluate,
    fit,
    learning_rate,
    run_epoch,
    run_step,
    shuffled_batches,
    train_step,
)
from xder_methods.lucir import LUCIR, LUCIRConfig
from xder_methods.lwf import LwF, LwFConfig, distillation_loss
from xder_methods.lwf_mc import LwFMC, LwFMCConfig
from xder_methods.profiling import OpCounter, is_host_sync, is_view
from xder_methods.protocols import (
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
from xder_methods.rpc import RPC, RPCConfig
from xder_methods.sgd import SGD, SGDConfig
from xder_methods.si import SI, SIConfig, si_importance, si_penalty
from xder_methods.xder import XDER, XDERConfig

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
    "RPC",
    "SGD",
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
    "Loop",
    "LwF",
    "LwFConfig",
    "LwFMC",
    "LwFMCConfig",
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
    "SGDConfig",
    "SIConfig",
    "StepGraphs",
    "StepNotReplayable",
    "StepOutput",
    "StepResult",
    "TaskData",
    "TaskRecord",
    "TaskStream",
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
    "check_schedule",
    "check_settings",
    "create_method",
    "distillation_loss",
    "evaluate",
    "ewc_penalty",
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
    "method_class",
    "method_config_class",
    "project_agem",
    "project_gem",
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
