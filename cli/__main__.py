"""``python -m coalitions.cli``: the ``coalitions`` command."""

import sys

from coalitions.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
