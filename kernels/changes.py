"""A change to a kernel config as it is written on a command line, for timing a shape's
pick beside the pick changed (``python3 -m benchmarks.bench_gemm --around-pick``).

A change is ``FIELD=VALUE`` pairs joined by commas, each FIELD one of ``GemmConfig``'s:

    num_stages=5            an absolute value
    num_stages=+1           a number moved by +N or -N from the pick's
    block_n=144,multicast=b two fields at once
    async_mma=true          a switch: true/false (or 1/0)
    multicast=none          no clusters (multicast's empty value)
    b128x208x64_t256_s4_w8_pr_e
                            a whole config by its id (``GemmConfig.id``): every field set,
                            so the same config beside each shape's pick (the pick a
                            former rule made, say)

``ConfigChange.parse`` refuses a bad change with a ValueError naming the field and the
rule; ``ConfigChange.apply`` gives the changed config, or the validator's ValueError where
the config it would give is not a valid one (a tile over the shared-memory budget...).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from kernels.gemm import MULTICASTS, POLICIES, GemmConfig

# The fields a change may set, read off ``GemmConfig``: its numbers, its switches and its
# two named choices (``accum_dtype`` and the shared-memory budget are no tuning knobs).
_COMPARED = [f for f in fields(GemmConfig) if f.compare]
NUMBER_FIELDS = tuple(f.name for f in _COMPARED if f.type is int)
SWITCH_FIELDS = tuple(f.name for f in _COMPARED if f.type is bool)
CHOICE_FIELDS = {"policy": tuple(POLICIES), "multicast": tuple(m or "none" for m in MULTICASTS)}
SWITCHES = {"true": True, "1": True, "false": False, "0": False}
FIELDS = (*NUMBER_FIELDS, *SWITCH_FIELDS, *CHOICE_FIELDS)


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """``text`` as parsed: the fields set outright, and the numbers moved from the
    config's own (``+N``/``-N``)."""

    text: str
    values: tuple[tuple[str, object], ...]
    moves: tuple[tuple[str, int], ...]

    @classmethod
    def parse(cls, text: str) -> ConfigChange:
        values: dict[str, object] = {}
        moves: dict[str, int] = {}
        if text.strip() and "=" not in text:
            try:
                whole = GemmConfig.from_id(text.strip())
            except ValueError as err:
                raise ValueError(
                    f"{text!r}: must be FIELD=VALUE[,FIELD=VALUE...] or a config id: {err}"
                ) from None
            return cls(text, tuple((f.name, getattr(whole, f.name)) for f in _COMPARED), ())
        if not text.strip():
            raise ValueError("a change must be FIELD=VALUE[,FIELD=VALUE...], e.g. num_stages=+1")
        for part in text.split(","):
            field, sep, value = (s.strip() for s in part.partition("="))
            if not sep:
                raise ValueError(f"{part!r}: must be FIELD=VALUE, e.g. num_stages=5")
            if field not in FIELDS:
                raise ValueError(f"{field!r}: must be one of GemmConfig's fields {list(FIELDS)}")
            if field in values or field in moves:
                raise ValueError(f"{field}: given twice in {text!r}")
            if field in NUMBER_FIELDS:
                sign = value[:1] if value[:1] in "+-" else ""
                digits = value[len(sign) :]
                if not digits.isdigit():
                    raise ValueError(
                        f"{field}={value}: must be a whole number, or +N/-N to move the "
                        "config's own"
                    )
                if sign:
                    moves[field] = int(value)
                else:
                    values[field] = int(digits)
            elif field in SWITCH_FIELDS:
                if value.lower() not in SWITCHES:
                    raise ValueError(f"{field}={value}: must be true or false (or 1/0)")
                values[field] = SWITCHES[value.lower()]
            else:
                choices = CHOICE_FIELDS[field]
                if value not in choices:
                    raise ValueError(f"{field}={value}: must be one of {list(choices)}")
                values[field] = "" if value == "none" else value
        return cls(text, tuple(values.items()), tuple(moves.items()))

    def apply(self, config: GemmConfig) -> GemmConfig:
        """``config`` changed; ValueError (the validator's) where that is no valid config."""
        changed = dict(self.values)
        changed.update({f: getattr(config, f) + step for f, step in self.moves})
        return replace(config, **changed)
