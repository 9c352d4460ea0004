"""The stage-04 report (``render_stage04``): the sweep's sections in ``sweep``, the Tuned
Configs section in ``tuned`` (what it reads off the tuner's log in ``knobs``), what both
share in ``common``; the prose is
``harness/report/templates/stage04.md``."""

from harness.report.stage04.common import KNOB_CASE, Device, fmt_optional
from harness.report.stage04.knobs import knob_effects
from harness.report.stage04.sweep import (
    TABLE_HEAD,
    config_cells,
    config_label,
    render_stage04,
    requested_id,
    run_device,
    short_error,
)
from harness.report.stage04.tuned import (
    Retune,
    Tuned,
    TunedRow,
    render_tuned,
    roofline_points,
    sweep_bars,
    tuned_rows,
)

__all__ = [
    "KNOB_CASE",
    "TABLE_HEAD",
    "Device",
    "Retune",
    "Tuned",
    "TunedRow",
    "config_cells",
    "config_label",
    "fmt_optional",
    "knob_effects",
    "render_stage04",
    "render_tuned",
    "requested_id",
    "roofline_points",
    "run_device",
    "short_error",
    "sweep_bars",
    "tuned_rows",
]
