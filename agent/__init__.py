"""gpuquota node agent: samples the GPUs of one server and ships the readings to gpuquota.

A package of its own: it depends on the standard library and `nvidia-ml-py` only, and never
imports the server's code.
"""

#: gpuquota's release version, server and agent alike: the one place it is written. The
#: server, its API schema and pyproject.toml read it from here, and the agent, shipped on its
#: own, carries it in every batch (docs/operations.md, "Upgrades").
__version__ = "1.0.0"
