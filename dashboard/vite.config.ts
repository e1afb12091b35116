import { readFileSync } from "node:fs";
import { defineConfig } from "vite";

/**
 * The optimizer names the API accepts, read from schemas/openapi.json at build time (the hyperparameter's
 * `pattern`, `^(adafactor|adam|...)$` spelt any case as `[Aa][Dd]...`), so the create form offers exactly
 * the API's list. tests/unit/test_dashboard_contract.py checks the committed build offers every one.
 */
function apiOptimizers(): string[] {
  const openapi = JSON.parse(readFileSync(new URL("../schemas/openapi.json", import.meta.url), "utf8"));
  const pattern: string = openapi.components.schemas.TrainingConfig.properties.hyperparameters.properties.optimizer.pattern;
  const body = pattern.replace(/^\^\(/, "").replace(/\)\$$/, "");
  return body.split("|").map((word) => word.replace(/\[(.)(.)\]/g, (_, upper: string, lower: string) => lower || upper.toLowerCase()));
}

// The built page ships inside the Python distribution (../dashboard_assets/static): served by local mode's
// front door at / and /assets/..., and uploaded to the assets bucket behind CloudFront in the cloud.
export default defineConfig({
  base: "/",
  define: { __API_OPTIMIZERS__: JSON.stringify(apiOptimizers()) },
  build: {
    outDir: "../dashboard_assets/static",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    assetsInlineLimit: 0,
  },
});
