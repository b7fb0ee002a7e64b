"""Test and benchmark support, not part of the runtime: nothing under ``twinkle_agentic`` outside
this package imports it.

- :mod:`.scripted_server`: a scripted OpenAI-compatible server (chat with ``#directives``, vLLM's
  ``/tokenize``, prompt logprobs and embeddings), in a child process or in a thread of this one;
- :mod:`.local_server`: run an HTTP server as a child process, health-checked, stopped by group;
- :mod:`.openenv_echo`: scaffold and serve OpenEnv's echo environment.
"""
