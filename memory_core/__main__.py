"""``python -m memory_core`` runs the ``memory-core`` command line."""

import sys

from memory_core.cli import main

if __name__ == "__main__":
    sys.exit(main())
