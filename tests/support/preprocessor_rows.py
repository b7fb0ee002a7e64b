"""Row builders shared by the preprocessor tests."""

from __future__ import annotations


def user(text, **extra):
    return {"role": "user", "content": text, **extra}


def assistant(text, **extra):
    return {"role": "assistant", "content": text, **extra}


def system(text):
    return {"role": "system", "content": text}


def tool(text, call_id="c1"):
    return {"role": "tool", "content": text, "tool_call_id": call_id}


def call(name="f", call_id="c1", arguments="{}"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def row(*messages, **extra):
    return {"messages": list(messages), **extra}


LONG_Q = "Please explain in detail how the caching layer of the server works."
LONG_A = "The caching layer keeps recent responses in memory and evicts the least recently used entry first. " * 2
