"""Tasks from user code: ``FILE.py::ClassName`` (or ``FILE.py``) -> a KernelBench-shaped Task.

Pure ``ast`` and text, standard library only: no user code runs and torch is not imported.
``parse`` (cached parsing) -> ``names`` (scope analysis) -> ``modules`` (nn.Module detection,
example inputs) -> ``assemble`` (the task's self-contained source) and ``stub`` (the quick-fix
stub); ``load`` is the entry point. See docs/tasks.md for the rules.
"""

from kevin_agent.task.load import ModuleClass, find_module_classes, input_stub, load_task, task_from_source

__all__ = ["ModuleClass", "find_module_classes", "input_stub", "load_task", "task_from_source"]
