"""``python -m tracejit``: the same command line as the ``tracejit`` console script (see tracejit/cli/)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
