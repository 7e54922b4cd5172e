"""Entry points of the ``rescue`` command: thin Hydra apps over the library."""

import time

#: ``time.perf_counter()`` when the ``rescue`` command started (before its heavy imports),
#: so a job's printed elapsed time can include them.
STARTED = time.perf_counter()
