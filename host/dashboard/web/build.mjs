// Bundles the page into one script and one stylesheet beside index.html,
// in the directory given (the Rust crate's OUT_DIR; `dist/` by default).
import { build } from "esbuild";
import { copyFile, mkdir } from "node:fs/promises";

const out = process.argv[2] ?? "dist";
await mkdir(out, { recursive: true });
await build({
  entryPoints: ["src/main.jsx"],
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  jsx: "automatic",
  jsxImportSource: "preact",
  outfile: `${out}/app.js`,
  logLevel: "warning",
});
await copyFile("src/index.html", `${out}/index.html`);
await copyFile("src/app.css", `${out}/app.css`);
