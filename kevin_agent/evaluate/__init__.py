"""The evaluator: the only code that runs model-written code, always in a child it can kill.

Parent side: ``evaluator`` (the real one), ``replay`` (recorded verdicts), ``isolation`` (worker
processes), ``verdicts``, ``environment``, ``api`` (the seam). Packages by where code runs:
``static`` (parent, before compiling), ``build`` (parent and compile children), ``worker``
(child processes only), ``source`` (the one model of a candidate's load_inline calls and C text).
``protocol`` is what crosses every process boundary. torch + standard library only.
"""
