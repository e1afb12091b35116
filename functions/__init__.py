"""The Lambda code of trainplane: one bundle, handlers -> service -> adapters."""
