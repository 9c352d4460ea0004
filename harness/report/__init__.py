"""Reports, rendered from ``templates/`` plus data: the stage-04 markdown and its plots,
the history detector's regressions report, the regression issues' text, the gate's PR
comment and the suite's cost table. Each reads the records it is handed through a small
protocol or as plain data; nothing here imports the suite or the gate."""
