"""Reports, rendered from ``templates/`` plus data: the stage-04 markdown and its plots,
the history detector's regressions report and the regression issues' text."""
