"""Entry point: `python -m agent --server URL --token-file PATH`."""

import sys

from agent.cli import main

sys.exit(main())
