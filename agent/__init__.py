"""gpuquota node agent: samples the GPUs of one server and ships the readings to gpuquota.

A package of its own: it depends on the standard library and `nvidia-ml-py` only, and never
imports the server's code.
"""

__version__ = "1.0.0"
