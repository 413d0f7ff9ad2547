"""``python -m launcher``: the supervisor's command line (see ``launcher/supervisor.py``)."""

import sys

from launcher.supervisor import main

if __name__ == "__main__":
    sys.exit(main())
