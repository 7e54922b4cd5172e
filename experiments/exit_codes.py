"""The ``rescue`` command's exit codes (the README's "Errors and exit codes"; what each means:
:mod:`rescue_env.experiments.errors`). A module of its own, importing nothing, so that the
console entry can name them before the commands' heavy imports."""

EXIT_OK = 0
EXIT_BUG = 1
EXIT_USER_ERROR = 2
EXIT_SOME_FAILED = 3
EXIT_INTERRUPTED = 130
