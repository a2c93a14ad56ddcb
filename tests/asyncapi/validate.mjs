// Validates an AsyncAPI document with the AsyncAPI project's own parser (@asyncapi/parser):
// the document is read from the file named on the command line (or standard input) and parsed
// with its specification schema and its recommended rules. Every diagnostic is printed, one a
// line, as `severity path: message`; the exit code is 1 if any is an error (or the document could
// not be parsed), else 0. Used by tests/contract/test_asyncapi.py on `horizon schema --asyncapi`.
import { readFileSync } from "node:fs";
import parserModule from "@asyncapi/parser";

const { Parser, DiagnosticSeverity } = parserModule;
const source = readFileSync(process.argv[2] ?? 0, "utf8");
const { document, diagnostics } = await new Parser().parse(source);

const names = { [DiagnosticSeverity.Error]: "error", [DiagnosticSeverity.Warning]: "warning",
                [DiagnosticSeverity.Information]: "info", [DiagnosticSeverity.Hint]: "hint" };
let errors = 0;
for (const d of diagnostics) {
  if (d.severity === DiagnosticSeverity.Error) errors += 1;
  console.log(`${names[d.severity] ?? d.severity} ${d.path.join(".") || "(document)"}: ${d.message} [${d.code}]`);
}
if (document === undefined || errors > 0) {
  console.log(`invalid: ${errors} error(s)`);
  process.exit(1);
}
const channels = document.channels().length, operations = document.operations().length;
const messages = document.components().messages().length;
console.log(`valid AsyncAPI ${document.version()}: ${channels} channels, ${operations} operations, ${messages} messages`);
