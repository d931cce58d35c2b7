"""The one door from a face (CLI, language server, terminal UI) to a run.

``RunService`` turns a ``RunRequest`` into a running session and owns every close;
``RunView`` folds the run's events into what every face displays.
"""
