"""The PR gate: revisions, the per-revision worker, the decision rule, rendering,
calibration, the self-test and bisect."""
