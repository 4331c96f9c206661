"""`xidpipe replay`: a recorded cluster through the stream's engine in one process (policy backtesting)."""

from xidpipe.replay.layout import ReplayInputError
from xidpipe.replay.run import ReplayResult, run_replay

__all__ = ["ReplayInputError", "ReplayResult", "run_replay"]
