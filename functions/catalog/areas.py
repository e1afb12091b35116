"""The artifacts bucket's areas besides a job's own prefix (`constants.job_prefix`): who may read and write them is
decided in functions/service/paths.py; the stack grants its roles the same prefixes (infra/constructs/)."""

from __future__ import annotations

from functions import constants

DATA_PREFIX = "data/"  # data/<principal-key>/...: each principal's own data area (read-write)
SHARED_PREFIX = "shared/"
SHARED_PREFIXES = (SHARED_PREFIX, constants.DATASETS_PREFIX)  # readable by everyone (datasets/: where retraining triggers watch)
