import { defineConfig } from "vite";

// The built page ships inside the Python distribution (../dashboard_assets/static): served by local mode's
// front door at / and /assets/..., and uploaded to the assets bucket behind CloudFront in the cloud.
export default defineConfig({
  base: "/",
  build: {
    outDir: "../dashboard_assets/static",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    assetsInlineLimit: 0,
  },
});
