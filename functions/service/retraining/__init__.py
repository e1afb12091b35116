"""Retraining policies (docs/RETRAINING.md): `policies.py` (create, edit, delete, their schedules), `dispatch.py`
(an event or a schedule's tick -> at most one job per policy and event), `routes.py` (which events reach the
dispatcher and which policies an event concerns)."""
