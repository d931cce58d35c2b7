"""Static checks: certain, cheap rejections before compiling (``checks.RULES``)."""
