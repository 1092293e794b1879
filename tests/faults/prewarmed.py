"""``loopruntime host``, started ahead: ``python -m tests.faults.prewarmed
ARGS...`` imports everything, prints ``warm``, waits for a line on stdin,
then runs ``loopruntime ARGS...`` as the command line does.

So a host "launched again at once" after a SIGKILL registers within a
moment of the kill, not after a second or more of imports on a busy machine.
"""

from __future__ import annotations

import os
import sys

import journal.postgres  # noqa: F401 - imported by a PostgreSQL URL, ahead here
import tests.faults.workload  # noqa: F401 - the definitions the host loads
from session.cli.main import main

if __name__ == "__main__":
    print("warm", flush=True)
    # From the file descriptor: the command line reconfigures sys.stdin,
    # which it cannot do once the text stream has been read.
    if os.read(0, 16):
        sys.exit(main(sys.argv[1:]))
