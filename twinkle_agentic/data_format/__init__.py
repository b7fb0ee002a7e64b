"""Data formats shared by every component: plain dicts typed with TypedDicts, plus sampling dataclasses."""

from .message import ContentPart, FunctionCall, FunctionSchema, Message, Role, Tool, ToolCall, ToolInfo
from .sampling import SampledSequence, SampleResponse, SamplingParams, StopReason, TokenLogprob
from .trajectory import InputFeature, Trajectory, UserData, pack_value, user_data_get, user_data_set

__all__ = [
    "ContentPart",
    "FunctionCall",
    "FunctionSchema",
    "InputFeature",
    "Message",
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
    "pack_value",
    "user_data_get",
    "user_data_set",
]
