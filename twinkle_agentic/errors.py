"""The root of every configuration error the project raises.

A caller catches `ConfigError` for any setting that was refused (a job config, a step's settings, a
deployment's arguments, a cluster option); each subclass names the setting and the fix in its
message. It subclasses `ValueError`, so code written against the documented API that catches
`ValueError` keeps working.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting was refused: the message names the setting and what to change."""
