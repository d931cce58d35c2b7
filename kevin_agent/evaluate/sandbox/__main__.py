"""``python -m kevin_agent.evaluate.sandbox``: attack a confined child, print a table, exit 1 if
anything that should be blocked was not (or something candidates need was refused)."""

from kevin_agent.evaluate.sandbox.check import main

raise SystemExit(main())
