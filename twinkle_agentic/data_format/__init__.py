"""Data formats shared by every component: plain dicts typed with TypedDicts, plus sampling dataclasses."""

from .message import ContentPart, FunctionCall, FunctionSchema, Message, Role, Tool, ToolCall, ToolInfo
from .sampling import (
    PolicyVersionRuns,
    SampledSequence,
    SampleResponse,
    SamplingParams,
    StopReason,
    TokenLogprob,
    check_policy_version_runs,
)
from .trajectory import (
    InputFeature,
    PolicySpan,
    Trajectory,
    UserData,
    pack_value,
    user_data_get,
    user_data_set,
)

__all__ = [
    "ContentPart",
    "FunctionCall",
    "FunctionSchema",
    "InputFeature",
    "Message",
    "PolicySpan",
    "PolicyVersionRuns",
    "Role",
    "SampleResponse",
    "SampledSequence",
    "SamplingParams",
    "StopReason",
    "TokenLogprob",
    "Tool",
    "ToolCall",
    "ToolInfo",
    "Trajectory",
    "UserData",
    "check_policy_version_runs",
    "pack_value",
    "user_data_get",
    "user_data_set",
]
