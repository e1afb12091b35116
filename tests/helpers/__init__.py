"""Shared test helpers: recorded API Gateway events (events.py) and job builders (jobs.py)."""
