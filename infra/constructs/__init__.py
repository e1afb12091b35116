"""The constructs the stack composes: storage, api, lifecycle, compute, events, retraining, observability.

Each construct owns its resources and offers `grant_*` methods; a function's role gets exactly the
grants its construct asks for, written out action by action (no `*` actions, no managed policies).
"""
