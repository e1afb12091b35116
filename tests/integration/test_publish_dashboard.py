"""infra/publish_dashboard.py against moto's S3 and CloudFront: what `make deploy` uploads after `cdk deploy`."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from infra.publish_dashboard import CONFIG_FILE, IMMUTABLE, NO_CACHE, publish, stack_outputs


@pytest.fixture
def build(tmp_path: Path) -> Path:
    (tmp_path / "assets").mkdir()
    (tmp_path / "index.html").write_text('<script src="/assets/index-new.js"></script>')
    (tmp_path / "assets" / "index-new.js").write_text("new()")
    (tmp_path / "source-hash.txt").write_text("abc")
    return tmp_path


def test_uploads_the_page_its_settings_prunes_old_builds_and_invalidates(build: Path) -> None:
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        cloudfront = boto3.client("cloudfront", region_name="us-east-1")
        s3.create_bucket(Bucket="dash")
        s3.put_object(Bucket="dash", Key="assets/index-old.js", Body=b"old()")
        distribution = cloudfront.create_distribution(
            DistributionConfig={
                "CallerReference": "x",
                "Comment": "",
                "Enabled": True,
                "Origins": {
                    "Quantity": 1,
                    "Items": [{"Id": "o", "DomainName": "dash.s3.amazonaws.com", "S3OriginConfig": {"OriginAccessIdentity": ""}}],
                },
                "DefaultCacheBehavior": {"TargetOriginId": "o", "ViewerProtocolPolicy": "redirect-to-https", "MinTTL": 0},
            }
        )["Distribution"]
        settings = {"mode": "cloud", "region": "us-east-1", "api_url": "https://a.execute-api.us-east-1.amazonaws.com/v1/"}
        outputs = {"DashboardBucketName": "dash", "DashboardDistributionId": distribution["Id"], "DashboardConfig": json.dumps(settings)}
        written = publish(outputs, s3, cloudfront, static_dir=build)
        assert written == ["assets/index-new.js", "index.html", CONFIG_FILE]  # the page after its assets
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket="dash")["Contents"]}
        assert keys == {"assets/index-new.js", "index.html", CONFIG_FILE}  # old build pruned, no source-hash.txt
        page = s3.get_object(Bucket="dash", Key="index.html")
        assert page["ContentType"] == "text/html" and page["CacheControl"] == NO_CACHE
        assert s3.get_object(Bucket="dash", Key="assets/index-new.js")["CacheControl"] == IMMUTABLE
        assert json.loads(s3.get_object(Bucket="dash", Key=CONFIG_FILE)["Body"].read()) == settings
        invalidations = cloudfront.list_invalidations(DistributionId=distribution["Id"])["InvalidationList"]
        assert invalidations["Quantity"] == 1


def test_a_stack_without_a_dashboard_is_named_as_such(build: Path) -> None:
    with pytest.raises(SystemExit, match="dashboard=true"):
        publish({"ApiUrl": "x"}, None, None, static_dir=build)


def test_stack_outputs_reads_describe_stacks() -> None:
    class Cfn:
        def describe_stacks(self, StackName: str) -> dict:
            assert StackName == "Trainplane-dev"
            return {"Stacks": [{"Outputs": [{"OutputKey": "DashboardBucketName", "OutputValue": "b"}]}]}

    assert stack_outputs(Cfn(), "Trainplane-dev") == {"DashboardBucketName": "b"}
