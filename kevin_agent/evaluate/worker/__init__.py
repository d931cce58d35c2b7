"""Code that runs only in the evaluator's child processes: the GPU worker (``main``, ``stages``,
``correctness``, ``timing``, ``guards``, ``speed_of_light``, ``loader``) and the load_inline
recorder (``record``). ``python -m kevin_agent.evaluate.worker`` starts a GPU worker."""

# The parent's cache folders, read before anything imports torch (cache_dirs says why).
from kevin_agent.evaluate.worker import cache_dirs as _cache_dirs  # noqa: F401
