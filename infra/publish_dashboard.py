"""Upload the built dashboard to a deployed stack's assets bucket: `make deploy` runs it after `cdk deploy`.

    python -m infra.publish_dashboard --stack Trainplane-dev [--region eu-west-1]

It reads the stack's outputs (DashboardBucketName, DashboardDistributionId, DashboardConfig), uploads
dashboard_assets/static (index.html uncached, content-hashed assets/ cached for a year) plus
dashboard-config.json, removes files of earlier builds, and invalidates the two uncached paths in
CloudFront. Run with the deployer's credentials; no Lambda in the stack needs write access to the bucket.
"""

from __future__ import annotations

import argparse
import mimetypes
import time
from pathlib import Path
from typing import Any

import boto3

from dashboard_assets import SOURCE_HASH_FILE, STATIC_DIR

CONFIG_FILE = "dashboard-config.json"
NO_CACHE = "no-cache"
IMMUTABLE = "public, max-age=31536000, immutable"


def stack_outputs(cloudformation: Any, stack: str) -> dict[str, str]:
    described = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}


def publish(outputs: dict[str, str], s3: Any, cloudfront: Any, static_dir: Path = STATIC_DIR) -> list[str]:
    """Upload the page; returns the keys written."""
    missing = [k for k in ("DashboardBucketName", "DashboardDistributionId", "DashboardConfig") if k not in outputs]
    if missing:
        raise SystemExit(f"the stack has no {', '.join(missing)} output: is it deployed with dashboard=true?")
    if not (static_dir / "index.html").exists():
        raise SystemExit(f"{static_dir} has no build: run `make dashboard`")
    bucket = outputs["DashboardBucketName"]
    written: list[str] = []
    # Assets first, the page that names them last: a visitor never gets a page whose scripts are missing.
    files = sorted((p for p in static_dir.rglob("*") if p.is_file() and p.name != SOURCE_HASH_FILE), key=lambda p: p.name == "index.html")
    for path in files:
        key = path.relative_to(static_dir).as_posix()
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        cache = IMMUTABLE if key.startswith("assets/") else NO_CACHE
        s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes(), ContentType=kind, CacheControl=cache)
        written.append(key)
    s3.put_object(
        Bucket=bucket, Key=CONFIG_FILE, Body=outputs["DashboardConfig"].encode(), ContentType="application/json", CacheControl=NO_CACHE
    )
    written.append(CONFIG_FILE)
    # Earlier builds' assets go once the new page is in place.
    stale = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket) for o in page.get("Contents", [])]
    stale = [key for key in stale if key not in written]
    if stale:
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": key} for key in stale]})
    cloudfront.create_invalidation(
        DistributionId=outputs["DashboardDistributionId"],
        InvalidationBatch={"Paths": {"Quantity": 2, "Items": ["/index.html", f"/{CONFIG_FILE}"]}, "CallerReference": str(time.time())},
    )
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", required=True)
    parser.add_argument("--region")
    parser.add_argument("--if-deployed", action="store_true", help="Do nothing when the stack has no dashboard (dashboard=false).")
    args = parser.parse_args(argv)
    session = boto3.Session(region_name=args.region)
    outputs = stack_outputs(session.client("cloudformation"), args.stack)
    if args.if_deployed and "DashboardBucketName" not in outputs:
        print(f"{args.stack} has no dashboard: nothing to publish")
        return
    written = publish(outputs, session.client("s3"), session.client("cloudfront"))
    url = outputs.get("DashboardUrl", "")
    print(f"dashboard published: {len(written)} files to s3://{outputs['DashboardBucketName']}  {url}")


if __name__ == "__main__":
    main()
