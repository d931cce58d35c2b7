"""Code that runs only in the evaluator's child processes: the GPU worker (``main``, ``stages``,
``correctness``, ``timing``, ``guards``, ``speed_of_light``, ``loader``) and the load_inline
recorder (``record``). ``python -m kevin_agent.evaluate.worker`` starts a GPU worker."""
