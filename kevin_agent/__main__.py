"""``python -m kevin_agent`` runs the ``kevin`` command."""

import sys

from kevin_agent.cli import main

sys.exit(main())
