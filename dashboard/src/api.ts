import { AwsClient } from "aws4fetch";
import { expired, type Credentials, type SiteConfig } from "./auth";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly errors: { field: string; message: string }[] = [],
  ) {
    super(message);
  }
  /** 403 from the edge: unsigned, unknown key, bad or expired signature or token. */
  get authProblem(): boolean {
    return this.status === 403;
  }
}

/** The API did not answer at all (down, wrong URL, network). */
export class Unreachable extends Error {}

export class Api {
  private client: AwsClient;
  constructor(
    readonly config: SiteConfig,
    readonly creds: Credentials,
  ) {
    this.client = new AwsClient({
      accessKeyId: creds.accessKeyId,
      secretAccessKey: creds.secretAccessKey,
      sessionToken: creds.sessionToken,
      service: "execute-api",
      region: config.region,
      retries: 0,
    });
  }

  url(path: string, query?: Record<string, string | number | undefined | null>): string {
    const base = this.config.api_url ? this.config.api_url.replace(/\/$/, "") : location.origin;
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined && v !== null && v !== "") params.set(k, String(v));
    const qs = params.toString();
    return base + path + (qs ? `?${qs}` : "");
  }

  async call<T = any>(method: string, path: string, opts: { query?: Record<string, any>; body?: unknown } = {}): Promise<T> {
    if (expired(this.creds)) throw new ApiError(403, "Your session has expired.");
    const init: RequestInit = { method, headers: {} };
    if (opts.body !== undefined) {
      init.body = JSON.stringify(opts.body);
      (init.headers as Record<string, string>)["Content-Type"] = "application/json";
    }
    let response: Response;
    try {
      response = await this.client.fetch(this.url(path, opts.query), init);
    } catch (exc) {
      throw new Unreachable(String(exc));
    }
    if (response.status === 204) return undefined as T;
    const text = await response.text();
    let data: any = undefined;
    try {
      data = text ? JSON.parse(text) : undefined;
    } catch {
      data = { message: text };
    }
    if (!response.ok) {
      if (response.status >= 502 && response.status <= 504 && !data?.errors) throw new Unreachable(`HTTP ${response.status}`);
      throw new ApiError(response.status, data?.message || `HTTP ${response.status}`, data?.errors || []);
    }
    return data as T;
  }

  get<T = any>(path: string, query?: Record<string, any>) {
    return this.call<T>("GET", path, { query });
  }
  post<T = any>(path: string, body: unknown = {}) {
    return this.call<T>("POST", path, { body });
  }
  patch<T = any>(path: string, body: unknown) {
    return this.call<T>("PATCH", path, { body });
  }
  del(path: string) {
    return this.call("DELETE", path);
  }
}
