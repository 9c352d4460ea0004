"""The history detector: every benchmark whose latest step in the stored asv history is a
slowdown beyond that benchmark's own noise (the method is told in
``harness.suite.regressions``, its command line).

- ``inputs``: where the history is and in which order (the branch's first-parent
  commits, the culprit's subject and author), the calibration files, ``-b``;
- ``threshold``: each benchmark's threshold, by ``harness.policy.POLICY``, and the term
  that set it;
- ``steps``: the latest change beyond a threshold in asv's piecewise-constant fit;
- ``find``: the two together over a machine's series;
- ``records``: what it finds, as ``Regression`` records.

``harness.suite.regressions_file`` writes them to ``regressions.json`` (and reads them
back for the announcer); ``harness.report.regressions`` renders the markdown.
"""
