"""Local mode: the whole control plane on one machine, no AWS account (`trainplane up`).

- up.py          orchestration: state dir, moto, deployers, journal, front door, endpoint.json, signals
- server.py      moto's ThreadedMotoServer on loopback, switched to what local mode needs
- moto_hooks.py  THE one module that reaches into moto's internals (pinned to moto 5.2.5): the
                 process-wide locks that make moto's DynamoDB and S3 safe under threads, and the
                 write-through journal hooks
- journal.py     the durable state: append-only JSON lines (fsync per record) + S3 bodies as files
- frontdoor.py   the HTTP server in front of the API handler, as API Gateway (REST, AWS_IAM) would be
- sigv4.py       SigV4 verification of what arrived at the front door
- credentials.py the local principals ("admin", "alice"), stable across restarts
- endpoint.py    endpoint.json: written atomically when ready, read by clients

Nothing here is imported by `import trainplane`: the client must not pay for moto.
"""
