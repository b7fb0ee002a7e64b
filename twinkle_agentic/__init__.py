"""twinkle_agentic: clean multi-turn chat/agent data and roll out tool-calling trajectories on Ray.

Importing the package needs none of the optional stacks (Ray, vLLM, Presidio, OpenEnv...).
"""

__version__ = "0.1.0"
