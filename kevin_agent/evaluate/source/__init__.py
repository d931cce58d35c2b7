"""One model of a candidate's source for the checks, the build and accept: its load_inline
calls (``calls``) and C/CUDA text (``clex``)."""
