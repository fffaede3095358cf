"""xder-methods: continual learners, the replay buffer and the class-incremental training loop.

Methods register by name (:func:`create_method`); each is one module with a frozen config
dataclass whose defaults are the paper's values. The package imports only torch (GEM loads its QP
solver, quadprog, when it first projects): backbones and data reach it through the protocols in
:mod:`xder_methods.core.protocols`.
"""

from xder_methods import methods as _methods  # noqa: F401  (registers every method)
from xder_methods.core.base import (
    ConfigT,
    MethodBase,
)
from xder_methods.core.errors import (
    MethodConfigError,
    MethodError,
    NonFiniteLossError,
    UnknownMethodError,
    check_settings,
)
from xder_methods.core.evaluation import (
    EpochRecord,
    Evaluation,
    History,
    TaskRecord,
    evaluate,
)
from xder_methods.core.graphs import (
    CaptureFailed,
    CudaGraphs,
    ReplayCheck,
    StepGraphs,
    StepNotReplayable,
    StepResult,
)
from xder_methods.core.loop import (
    CHECKPOINT_FORMAT,
    Callback,
    FitState,
    apply_step,
    fit,
    run_epoch,
    run_step,
    train_step,
)
from xder_methods.core.passes import (
    train_passes,
)
from xder_methods.core.profiling import (
    OpCounter,
    is_host_sync,
    is_view,
)
from xder_methods.core.protocols import (
    Backbone,
    Batch,
    ContinualMethod,
    ContinualSetting,
    MethodConfig,
    StepOutput,
    StepPolicy,
    TaskBudget,
    TaskData,
    TaskStream,
    TaskView,
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
    TrainingProtocol,
    TrainingSchedule,
    autocast,
    batch_bounds,
    begin_step,
    learning_rate,
    shuffled_batches,
)
from xder_methods.core.threads import (
    LOAD_ENV,
    RECHECK_SECONDS,
    SHARE_DIR_ENV,
    CpuShare,
    MachineLoad,
    ThreadPolicy,
    fair_threads,
    fixed_threads,
    machine_busy_seconds,
    machine_cores,
    process_seconds,
    share_dir,
)
from xder_methods.methods.agem import (
    AGEM,
    AGEMConfig,
    project_agem,
)
from xder_methods.methods.bic import (
    BiC,
    BiCConfig,
    bias_correct,
    bic_distillation_loss,
    distillation_weight,
    distillation_weights,
    holdout_size,
    interleaved_order,
    task_balanced_mask,
)
from xder_methods.methods.der import (
    DER,
    DERConfig,
)
from xder_methods.methods.derpp import (
    DERpp,
    DERppConfig,
)
from xder_methods.methods.derpp_ace import (
    DERppACE,
    DERppACEConfig,
)
from xder_methods.methods.er import (
    ER,
    ReplayConfigT,
)
from xder_methods.methods.er_ace import (
    ERACE,
    ERACEConfig,
)
from xder_methods.methods.ewc_on import (
    OnlineEWC,
    OnlineEWCConfig,
    ewc_penalty,
    fisher_diagonal,
)
from xder_methods.methods.fdr import (
    FDR,
    FDRConfig,
    function_distance,
)
from xder_methods.methods.flatness import (
    ERFlat,
    ERFlatConfig,
    local_flatness,
    local_linearity,
)
from xder_methods.methods.gdumb import (
    GDumb,
    GDumbConfig,
    cutmix,
    cutmix_box,
    cutmix_cross_entropy,
    gdumb_learning_rate,
    greedy_class_balanced_slots,
    paste_box,
    sample_symmetric_beta,
)
from xder_methods.methods.gem import (
    GEM,
    GEMConfig,
    project_gem,
)
from xder_methods.methods.gss import (
    EMPTY_BUFFER_SCORE,
    GSS,
    GSSConfig,
    ScoredBuffer,
    gss_replacement,
    gss_scores,
)
from xder_methods.methods.hal import (
    ANCHOR_LR_BEFORE_TRAINING,
    HAL,
    HALConfig,
    anchor_loss,
    anchor_objective,
)
from xder_methods.methods.icarl import (
    ICaRL,
    ICaRLConfig,
)
from xder_methods.methods.joint import (
    Joint,
    JointConfig,
)
from xder_methods.methods.lucir import (
    LUCIR,
    LUCIRConfig,
    fitting_learning_rate,
    imprinted_weights,
    less_forget_distance,
    margin_ranking_loss,
)
from xder_methods.methods.lwf import (
    LwF,
    LwFConfig,
    distillation_loss,
    smooth_probabilities,
    warm_up_head,
)
from xder_methods.methods.lwf_mc import (
    LwFMC,
    LwFMCConfig,
    binary_cross_entropy_per_item,
    distillation_targets,
)
from xder_methods.methods.rpc import (
    RPC,
    RPCConfig,
)
from xder_methods.methods.sgd import (
    FineTuning,
    FineTuningConfig,
)
from xder_methods.methods.si import (
    SI,
    SIConfig,
    path_contribution,
    si_importance,
    si_penalty,
)
from xder_methods.methods.xder import (
    XDER,
    XDERConfig,
)
from xder_methods.parts.anchoring import (
    AnchoredFineTuning,
    quadratic_penalty,
)
from xder_methods.parts.buffer import (
    Buffer,
    BufferSample,
    reservoir_slots,
)
from xder_methods.parts.gradients import (
    assign_gradients,
    flat_parameters,
    flatten_gradients,
    per_example_gradients,
)
from xder_methods.parts.heads import (
    CosineHead,
    polytope_logits,
    regular_simplex,
)
from xder_methods.parts.losses import (
    at_least_float32,
    future_constraint,
    future_preparation_loss,
    logit_matching_loss,
    past_constraint,
    rescale_logits,
    seen_class_cross_entropy,
    separated_cross_entropy,
    violation_mean,
)
from xder_methods.parts.networks import (
    eval_features,
    frozen_batchnorm_stats,
    frozen_copy,
)
from xder_methods.parts.replay import (
    DarkReplayConfig,
    ExemplarReplay,
    ExemplarReplayConfig,
    MergedReplay,
    ReplayConfig,
    ReplayForward,
    forward_parts,
    join_replay,
    merged_share,
    replay_exemplars,
    stream_buffer_groups,
)
from xder_methods.parts.selection import (
    class_balanced_quotas,
    class_mean_features,
    first_occurrence,
    herding,
    nearest_mean_scores,
    rank_within_class,
    update_herding_buffer,
)
from xder_methods.parts.task_memory import (
    TaskMemory,
    kept_rows,
    per_task_share,
    ring_slots,
    task_memory_rows,
)
from xder_methods.parts.teacher import (
    PreviousModelTeacher,
)

__all__ = [
    "AGEM",
    "ANCHOR_LR_BEFORE_TRAINING",
    "CHECKPOINT_FORMAT",
    "DER",
    "EMPTY_BUFFER_SCORE",
    "ER",
    "ERACE",
    "FDR",
    "GEM",
    "GSS",
    "HAL",
    "LOAD_ENV",
    "LUCIR",
    "RECHECK_SECONDS",
    "RPC",
    "SHARE_DIR_ENV",
    "SI",
    "XDER",
    "AGEMConfig",
    "AnchoredFineTuning",
    "Backbone",
    "Batch",
    "BiC",
    "BiCConfig",
    "Buffer",
    "BufferSample",
    "Callback",
    "CaptureFailed",
    "ConfigT",
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
    "ExemplarReplay",
    "ExemplarReplayConfig",
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
    "MergedReplay",
    "MethodBase",
    "MethodConfig",
    "MethodConfigError",
    "MethodError",
    "NonFiniteLossError",
    "OnlineEWC",
    "OnlineEWCConfig",
    "OpCounter",
    "PreviousModelTeacher",
    "RPCConfig",
    "ReplayCheck",
    "ReplayConfig",
    "ReplayConfigT",
    "ReplayForward",
    "SIConfig",
    "ScoredBuffer",
    "StepGraphs",
    "StepNotReplayable",
    "StepOutput",
    "StepPolicy",
    "StepResult",
    "TaskBudget",
    "TaskData",
    "TaskMemory",
    "TaskRecord",
    "TaskStream",
    "TaskView",
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
    "assign_gradients",
    "at_least_float32",
    "autocast",
    "batch_bounds",
    "begin_step",
    "bias_correct",
    "bic_distillation_loss",
    "binary_cross_entropy_per_item",
    "check_schedule",
    "check_settings",
    "class_balanced_quotas",
    "class_mean_features",
    "create_method",
    "cutmix",
    "cutmix_box",
    "cutmix_cross_entropy",
    "distillation_loss",
    "distillation_targets",
    "distillation_weight",
    "distillation_weights",
    "eval_features",
    "evaluate",
    "ewc_penalty",
    "fair_threads",
    "first_occurrence",
    "fisher_diagonal",
    "fit",
    "fitting_learning_rate",
    "fixed_threads",
    "flat_parameters",
    "flatten_gradients",
    "forward_parts",
    "frozen_batchnorm_stats",
    "frozen_copy",
    "function_distance",
    "future_constraint",
    "future_preparation_loss",
    "gdumb_learning_rate",
    "greedy_class_balanced_slots",
    "gss_replacement",
    "gss_scores",
    "herding",
    "holdout_size",
    "imprinted_weights",
    "interleaved_order",
    "is_host_sync",
    "is_view",
    "join_replay",
    "kept_rows",
    "learning_rate",
    "less_forget_distance",
    "list_methods",
    "local_flatness",
    "local_linearity",
    "logit_matching_loss",
    "machine_busy_seconds",
    "machine_cores",
    "margin_ranking_loss",
    "merged_share",
    "method_class",
    "method_config_class",
    "nearest_mean_scores",
    "past_constraint",
    "paste_box",
    "path_contribution",
    "per_example_gradients",
    "per_task_share",
    "polytope_logits",
    "process_seconds",
    "project_agem",
    "project_gem",
    "quadratic_penalty",
    "rank_within_class",
    "register_method",
    "regular_simplex",
    "replay_exemplars",
    "rescale_logits",
    "reservoir_slots",
    "ring_slots",
    "run_epoch",
    "run_step",
    "sample_symmetric_beta",
    "seen_class_cross_entropy",
    "separated_cross_entropy",
    "share_dir",
    "shuffled_batches",
    "si_importance",
    "si_penalty",
    "smooth_probabilities",
    "stream_buffer_groups",
    "task_balanced_mask",
    "task_memory_rows",
    "train_passes",
    "train_step",
    "update_herding_buffer",
    "violation_mean",
    "warm_up_head",
]
