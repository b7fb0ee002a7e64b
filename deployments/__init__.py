"""Ray Serve applications: the tool server (tool_server.py) and the OpenEnv-protocol env server
(env_server.py, protocol in openenv_protocol.py); their Serve config lives in configs/."""
