"""The API server as ``fleet chat`` starts it: bound to end with the chat that started it.

On Linux the server asks the kernel for SIGTERM when its parent dies, so a chat killed outright
(its terminal closed, ``kill -9``) never leaves a server behind. Usage:
``python -m fleet_rlm.clients.terminal.background_server PARENT_PID [fleet serve arguments]``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    parent = int(argv[0])
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the chat ended before the request above was in place
        return 0
    from fleet_rlm.api.server import main as serve
    from fleet_rlm.clients import web

    return serve(argv[1:], web.routes())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
