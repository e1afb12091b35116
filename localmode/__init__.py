"""Local mode: the whole control plane on one machine, no AWS account (`trainplane up`, `python -m localmode`).

Everything that exists only to run the control plane on one machine lives here (docs/ARCHITECTURE.md):
- up.py             orchestration: state dir, moto, deployers, journal, front door, endpoint.json, signals
- server.py         moto's ThreadedMotoServer on loopback, switched to what local mode needs
- moto_hooks.py     THE one module that reaches into moto's internals (pinned to moto 5.2.5): the
                    process-wide locks that make moto's DynamoDB and S3 safe under threads, and the
                    write-through journal hooks; moto_journal_ops.py the journal's ops of moto's state;
                    moto_speedups.py its hot-path speed-ups
- moto_inprocess.py the in-process handlers' boto3 calls answered by moto without HTTP
- moto_lambda.py    our Lambda handlers run in-process behind moto's Lambda and Step Functions
- journal.py        the durable state: append-only JSON lines (fsync per record) + S3 bodies as files
- frontdoor.py      the HTTP server in front of the API handler, as API Gateway (REST, AWS_IAM) would be
- sigv4.py          SigV4 verification of what arrived at the front door
- credentials.py    the local principals ("admin", "alice"; dashboard users of one Cognito role when the file
                    holds them or `--dashboard-user` asks), stable across restarts
- deploy/           the cloud stack's resources created in the emulated AWS (tables, buckets, the state
                    machine from infra/statemachine, the emulated SageMaker/EC2 compute, the retraining pump,
                    the dashboard's user pool with its people's groups)

It depends on functions, schemas and infra/statemachine (shared with the cloud stack); only the CLI's
`trainplane up` (lazily) and tests import it. The client (trainplane/) reads endpoint.json; it must not pay for moto.
"""
