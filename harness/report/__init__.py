"""Reports of measured sweeps: the stage-04 markdown and its plots."""
