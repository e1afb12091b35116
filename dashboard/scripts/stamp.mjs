// Writes static/source-hash.txt: the sha256 of every file the build reads (src/, index.html, configs, lockfile).
// tests/unit/test_dashboard_assets.py recomputes it to prove the committed build matches the source.
import { createHash } from "node:crypto";
import { readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const root = new URL("..", import.meta.url).pathname;
const inputs = ["index.html", "package.json", "package-lock.json", "tsconfig.json", "vite.config.ts"];
function walk(dir) {
  for (const name of readdirSync(join(root, dir)).sort()) {
    const path = join(dir, name);
    if (statSync(join(root, path)).isDirectory()) walk(path);
    else inputs.push(path);
  }
}
walk("src");
const hash = createHash("sha256");
for (const path of inputs.sort()) {
  hash.update(path.split("\\").join("/") + "\0");
  hash.update(readFileSync(join(root, path)));
  hash.update("\0");
}
writeFileSync(join(root, "../dashboard_assets/static/source-hash.txt"), hash.digest("hex") + "\n");
