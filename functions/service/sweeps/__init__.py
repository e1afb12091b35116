"""Hyperparameter sweeps (docs/SWEEPS.md): `service.py` (create, read, list, pause, resume, cancel, delete; the API
side, no Optuna), `controller.py` (each decision rebuilds the Optuna study from DynamoDB: the only module importing
Optuna, in its own Lambda and bundle), `hooks.py` (a trial's trainer reports and run end wake its sweep; no Optuna)."""
