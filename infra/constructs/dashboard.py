"""The web dashboard in the cloud: its built page behind CloudFront, and who may sign in.

- Assets bucket (private, SSL-only, S3-managed keys), read by CloudFront through origin access control
  only. The page (dashboard_assets/static, built from dashboard/) and its dashboard-config.json are
  uploaded by `make deploy` right after `cdk deploy` (infra/publish_dashboard.py, with the deployer's
  credentials), not by CDK's BucketDeployment: that one adds a Lambda with managed policies and
  wildcard actions, which this stack allows nowhere.
- CloudFront: HTTPS only (HTTP redirects), a response headers policy with the security headers (CSP that
  lets the page talk only to its own origin, the API, Cognito; HSTS; nosniff; frame DENY; no referrer),
  access logs to a bucket of their own.
- Sign-in: a Cognito user pool (invite-only, MFA required, strong passwords) with a Hosted UI domain and a
  public app client (authorization code + PKCE, back to the distribution), and an identity pool whose
  authenticated role may only invoke the API. The page signs every API call with SigV4 using those
  temporary credentials: the same IAM path as the CLI, nothing bypasses it. Each person is a principal
  of their own (functions/service/principal.py caller_arn).
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_cloudfront as cloudfront
from aws_cdk import aws_cloudfront_origins as origins
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from dashboard_assets import STATIC_DIR
from infra.config import ConfigError, StageConfig
from infra.constructs.api import API_STAGE, Api
from infra.constructs.common import allow, arn, removal_policy

CONFIG_FILE = "dashboard-config.json"


class Dashboard(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig) -> None:
        super().__init__(scope, construct_id)
        if not (STATIC_DIR / "index.html").exists():
            raise ConfigError(f"{STATIC_DIR} has no index.html: build the dashboard with `make dashboard` (or set dashboard=false)")
        self.config = config
        stack = Stack.of(self)
        self.assets_bucket = s3.Bucket(
            self,
            "AssetsBucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            # Retained like every bucket of the stack (a non-empty bucket would fail the stack's deletion anyway).
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.logs_bucket = s3.Bucket(
            self,
            "AccessLogsBucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            # CloudFront's standard logs are written with an ACL: the bucket must accept ACLs.
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
            lifecycle_rules=[s3.LifecycleRule(id="expire-access-logs", expiration=Duration.days(365))],
            removal_policy=RemovalPolicy.RETAIN,
        )
        Validations.of(self.logs_bucket).acknowledge(
            Acknowledgment(
                id="AwsSolutions-S1", reason="This is the dashboard's access-log bucket itself; logging it into itself would loop."
            )
        )
        Validations.of(self.assets_bucket).acknowledge(
            Acknowledgment(
                id="AwsSolutions-S1",
                reason="Only CloudFront reads this bucket (origin access control); every request is in the distribution's access logs.",
            )
        )

        # --- sign-in ---------------------------------------------------------------------------
        self.user_pool = cognito.UserPool(
            self,
            "Users",
            user_pool_name=config.name("dashboard-users"),
            self_sign_up_enabled=False,  # admins invite their team (docs/DEPLOY.md)
            sign_in_aliases=cognito.SignInAliases(email=True),
            auto_verify=cognito.AutoVerifiedAttrs(email=True),
            mfa=cognito.Mfa.REQUIRED,
            mfa_second_factor=cognito.MfaSecondFactor(otp=True, sms=False),
            password_policy=cognito.PasswordPolicy(
                min_length=12, require_lowercase=True, require_uppercase=True, require_digits=True, require_symbols=True
            ),
            account_recovery=cognito.AccountRecovery.EMAIL_ONLY,
            removal_policy=removal_policy(config),
        )
        plus_only = (
            "Threat protection (advanced security) needs Cognito's paid Plus feature plan; the pool is invite-only with MFA "
            "required, and a signed-in user only gets credentials that may invoke the API."
        )
        Validations.of(self.user_pool).acknowledge(
            Acknowledgment(id="AwsSolutions-COG3", reason=plus_only), Acknowledgment(id="AwsSolutions-COG8", reason=plus_only)
        )
        prefix = config.dashboard_auth_domain_prefix or f"trainplane-{config.stage}-{stack.account}"
        self.domain = self.user_pool.add_domain("HostedUi", cognito_domain=cognito.CognitoDomainOptions(domain_prefix=prefix))

        # --- the page ----------------------------------------------------------------------------
        region = stack.region
        hosted_ui = self.hosted_ui = f"https://{prefix}.auth.{region}.amazoncognito.com"
        csp = "; ".join(
            [
                "default-src 'self'",
                "script-src 'self'",
                "style-src 'self' 'unsafe-inline'",
                "img-src 'self' data: blob:",
                f"connect-src 'self' https://*.execute-api.{region}.{stack.url_suffix} "
                f"https://cognito-identity.{region}.{stack.url_suffix} {hosted_ui}",
                "frame-ancestors 'none'",
                "base-uri 'none'",
                f"form-action 'self' {hosted_ui}",
                "object-src 'none'",
            ]
        )
        headers = cloudfront.ResponseHeadersPolicy(
            self,
            "SecurityHeaders",
            response_headers_policy_name=config.name("dashboard-security-headers"),
            security_headers_behavior=cloudfront.ResponseSecurityHeadersBehavior(
                content_security_policy=cloudfront.ResponseHeadersContentSecurityPolicy(content_security_policy=csp, override=True),
                content_type_options=cloudfront.ResponseHeadersContentTypeOptions(override=True),
                frame_options=cloudfront.ResponseHeadersFrameOptions(frame_option=cloudfront.HeadersFrameOption.DENY, override=True),
                referrer_policy=cloudfront.ResponseHeadersReferrerPolicy(
                    referrer_policy=cloudfront.HeadersReferrerPolicy.NO_REFERRER, override=True
                ),
                strict_transport_security=cloudfront.ResponseHeadersStrictTransportSecurity(
                    access_control_max_age=Duration.days(365), include_subdomains=True, override=True
                ),
                xss_protection=cloudfront.ResponseHeadersXSSProtection(protection=True, mode_block=True, override=True),
            ),
        )
        self.distribution = cloudfront.Distribution(
            self,
            "Distribution",
            comment=f"trainplane {config.stage} dashboard",
            default_root_object="index.html",
            default_behavior=cloudfront.BehaviorOptions(
                origin=origins.S3BucketOrigin.with_origin_access_control(self.assets_bucket),
                viewer_protocol_policy=cloudfront.ViewerProtocolPolicy.REDIRECT_TO_HTTPS,
                allowed_methods=cloudfront.AllowedMethods.ALLOW_GET_HEAD,
                cache_policy=cloudfront.CachePolicy.CACHING_OPTIMIZED,
                response_headers_policy=headers,
                compress=True,
            ),
            http_version=cloudfront.HttpVersion.HTTP2_AND_3,
            price_class=cloudfront.PriceClass.PRICE_CLASS_100,
            enable_logging=True,
            log_bucket=self.logs_bucket,
            log_file_prefix="cloudfront/",
        )
        Validations.of(self.distribution).acknowledge(
            Acknowledgment(
                id="AwsSolutions-CFR1", reason="The team decides who may sign in (Cognito, invite-only); no country is excluded."
            ),
            Acknowledgment(
                id="AwsSolutions-CFR2",
                reason=(
                    "The distribution serves static files only; the API it calls has its own throttling and optional WAF (waf_web_acl_arn)."
                ),
            ),
            Acknowledgment(
                id="AwsSolutions-CFR4",
                reason=(
                    "The default *.cloudfront.net certificate cannot pin a minimum TLS version; HTTP is redirected to HTTPS. "
                    "A custom domain with its own certificate (TLSv1.2_2021) is an operator's choice (docs/DEPLOY.md)."
                ),
            ),
        )
        self.origin = f"https://{self.distribution.distribution_domain_name}"

        self.client = self.user_pool.add_client(
            "Web",
            user_pool_client_name=config.name("dashboard"),
            generate_secret=False,  # a browser app cannot keep a secret: PKCE instead
            auth_flows=cognito.AuthFlow(user_srp=True),
            o_auth=cognito.OAuthSettings(
                flows=cognito.OAuthFlows(authorization_code_grant=True),
                scopes=[cognito.OAuthScope.OPENID, cognito.OAuthScope.EMAIL],
                callback_urls=[f"{self.origin}/"],
                logout_urls=[f"{self.origin}/"],
            ),
            prevent_user_existence_errors=True,
            id_token_validity=Duration.hours(1),
            access_token_validity=Duration.hours(1),
            refresh_token_validity=Duration.days(1),
        )
        self.identity_pool = cognito.CfnIdentityPool(
            self,
            "Identities",
            identity_pool_name=config.name("dashboard").replace("-", "_"),
            allow_unauthenticated_identities=False,
            allow_classic_flow=False,
            cognito_identity_providers=[
                cognito.CfnIdentityPool.CognitoIdentityProviderProperty(
                    client_id=self.client.user_pool_client_id,
                    provider_name=self.user_pool.user_pool_provider_name,
                    server_side_token_check=True,
                )
            ],
        )
        self.users_role = iam.Role(
            self,
            "SignedInRole",
            description="Signed-in dashboard users: may invoke the trainplane API, nothing else",
            max_session_duration=Duration.hours(1),
            assumed_by=iam.FederatedPrincipal(
                "cognito-identity.amazonaws.com",
                conditions={
                    "StringEquals": {"cognito-identity.amazonaws.com:aud": self.identity_pool.ref},
                    "ForAnyValue:StringLike": {"cognito-identity.amazonaws.com:amr": "authenticated"},
                },
                assume_role_action="sts:AssumeRoleWithWebIdentity",
            ),
        )
        cognito.CfnIdentityPoolRoleAttachment(
            self, "Roles", identity_pool_id=self.identity_pool.ref, roles={"authenticated": self.users_role.role_arn}
        )

    def grant_read_groups(self, role: iam.IRole) -> None:
        """Read a signed-in person's groups (team membership, members.cognito_groups): the user by their sub
        (ListUsers), then their groups (AdminListGroupsForUser); on this pool alone (functions/adapters/cognito_groups.py)."""
        allow(role, ["cognito-idp:ListUsers", "cognito-idp:AdminListGroupsForUser"], [self.user_pool.user_pool_arn])

    def publish(self, api: Api) -> None:
        """Let signed-in users invoke `api`; the page's settings (dashboard-config.json) name it."""
        allow(
            self.users_role,
            ["execute-api:Invoke"],
            [arn(self, "execute-api", f"{api.rest_api.rest_api_id}/{API_STAGE}/*/*")],
            why=(
                "Every method and path of this one API stage: the page calls the whole API, each call IAM-authorised "
                "and owner-scoped by the handler."
            ),
        )
        stack = Stack.of(self)
        self.settings = {
            "mode": "cloud",
            "region": stack.region,
            "api_url": api.url,
            "cognito": {
                "domain": self.hosted_ui,
                "client_id": self.client.user_pool_client_id,
                "user_pool_id": self.user_pool.user_pool_id,
                "identity_pool_id": self.identity_pool.ref,
            },
        }
