"""``kevin bench``: the Kevin/KernelBench table for any model, on the evaluator users trust.

``tasks`` finds KernelBench-format task files, ``manifest`` keeps a benchmark's plan and the run of
each task (resumable), ``runner`` plays one stored run per task through the run service,
``replies`` turns recorded model output into scripted runs, ``metrics`` computes the table and
``report`` prints it, writes JSON and an HTML report, and compares two results.
"""
