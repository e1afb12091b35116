// Credentials for SigV4. Every API call is signed with them (api.ts); nothing else authorises the page.
//  - local mode: `trainplane dashboard` opens /#code=<one-time code>; the page trades the code for a local
//    principal's keys at POST /_dashboard/session (loopback only, single use, 2 minutes). The fragment is
//    never sent to a server, and the page removes it from the address bar and history at once.
//  - cloud: Cognito Hosted UI (authorization code + PKCE) -> ID token -> identity pool -> temporary keys of
//    the authenticated role, which may invoke the API.
//  - either: access keys typed in (e.g. from endpoint.json).
// Keys live in sessionStorage: this tab only, gone when it closes.

export interface Credentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
  expiration?: number; // ms since epoch
  principal: string;
}

export interface CognitoConfig {
  domain: string; // https://<prefix>.auth.<region>.amazoncognito.com
  client_id: string;
  user_pool_id: string;
  identity_pool_id: string;
}

export interface SiteConfig {
  mode: "local" | "cloud";
  region: string;
  api_url: string; // "" = same origin
  cognito?: CognitoConfig;
}

const KEY = "trainplane.credentials";
const PKCE_KEY = "trainplane.pkce";

export function loadCredentials(): Credentials | null {
  try {
    const raw = sessionStorage.getItem(KEY);
    return raw ? (JSON.parse(raw) as Credentials) : null;
  } catch {
    return null;
  }
}

export function saveCredentials(creds: Credentials | null): void {
  if (creds) sessionStorage.setItem(KEY, JSON.stringify(creds));
  else sessionStorage.removeItem(KEY);
}

export function expired(creds: Credentials, now = Date.now()): boolean {
  return creds.expiration !== undefined && creds.expiration - 30_000 < now;
}

/** Local mode: trade the one-time code from the URL fragment for a principal's keys. */
export async function exchangeLocalCode(code: string): Promise<Credentials> {
  const response = await fetch("/_dashboard/session", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ code }),
    cache: "no-store",
    credentials: "omit",
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.message || `sign-in refused (${response.status})`);
  return { accessKeyId: body.access_key_id, secretAccessKey: body.secret_access_key, principal: body.principal };
}

// --- Cognito (cloud) ---------------------------------------------------------------------------------

function b64url(bytes: ArrayBuffer | Uint8Array): string {
  const data = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  let text = "";
  for (const b of data) text += String.fromCharCode(b);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function redirectUri(): string {
  return location.origin + "/";
}

export async function startCognitoSignIn(cognito: CognitoConfig): Promise<void> {
  const verifier = b64url(crypto.getRandomValues(new Uint8Array(32)));
  const state = b64url(crypto.getRandomValues(new Uint8Array(16)));
  const challenge = b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  sessionStorage.setItem(PKCE_KEY, JSON.stringify({ verifier, state }));
  const params = new URLSearchParams({
    response_type: "code",
    client_id: cognito.client_id,
    redirect_uri: redirectUri(),
    scope: "openid email",
    state,
    code_challenge: challenge,
    code_challenge_method: "S256",
  });
  location.assign(`${cognito.domain}/oauth2/authorize?${params}`);
}

async function identityCall(region: string, target: string, body: unknown): Promise<any> {
  const response = await fetch(`https://cognito-identity.${region}.amazonaws.com/`, {
    method: "POST",
    headers: { "Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": `AWSCognitoIdentityService.${target}` },
    body: JSON.stringify(body),
  });
  const data = await response.json();
  if (!response.ok) throw new Error(data.message || `${target} failed (${response.status})`);
  return data;
}

/** Back from the Hosted UI with ?code=&state=: the ID token, then the identity pool's temporary keys. */
export async function finishCognitoSignIn(config: SiteConfig, code: string, state: string): Promise<Credentials> {
  const cognito = config.cognito!;
  const saved = JSON.parse(sessionStorage.getItem(PKCE_KEY) || "{}");
  sessionStorage.removeItem(PKCE_KEY);
  if (!saved.verifier || saved.state !== state) throw new Error("sign-in state does not match: start again");
  const tokenResponse = await fetch(`${cognito.domain}/oauth2/token`, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      client_id: cognito.client_id,
      code,
      redirect_uri: redirectUri(),
      code_verifier: saved.verifier,
    }),
  });
  const tokens = await tokenResponse.json();
  if (!tokenResponse.ok) throw new Error(tokens.error_description || tokens.error || "token exchange failed");
  const provider = `cognito-idp.${config.region}.amazonaws.com/${cognito.user_pool_id}`;
  const logins = { [provider]: tokens.id_token };
  const { IdentityId } = await identityCall(config.region, "GetId", { IdentityPoolId: cognito.identity_pool_id, Logins: logins });
  const { Credentials: c } = await identityCall(config.region, "GetCredentialsForIdentity", { IdentityId, Logins: logins });
  const claims = JSON.parse(atob(tokens.id_token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
  return {
    accessKeyId: c.AccessKeyId,
    secretAccessKey: c.SecretKey,
    sessionToken: c.SessionToken,
    expiration: c.Expiration * 1000,
    principal: claims.email || claims["cognito:username"] || IdentityId,
  };
}
