"""Imported by the forkserver only, first of its preload list (:data:`workers.launch.FORKSERVER_PRELOAD`):
Ctrl-C is ignored from here on.

The forkserver ignores SIGINT itself once its loop starts, but in every child it forks it puts back
the handlers it found at that moment, Python's KeyboardInterrupt one included, and the worker only
ignores SIGINT again a few statements later (:func:`workers.runtime.worker_main`). A terminal's
Ctrl-C landing in between printed a KeyboardInterrupt traceback from a worker that was just
starting. Ignored here, before the forkserver loop records its handlers, what a child gets back is
"ignored": no moment of a worker's life catches SIGINT.

Nothing else imports this module (the owner must keep its own Ctrl-C).
"""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
