// Unit tests of the extension's pure parts, run by node's test runner on the compiled output
// (`npm test`, or tests/test_vscode_units.py, which compiles first).
import * as assert from "node:assert/strict";
import { test } from "node:test";
import { resolveServerCommand } from "../serverCommand";
import { deprecationNote, userSettings } from "../settings";

test("a bare kevin resolves to the workspace's .venv first, then venv, over the folders in order", () => {
  const present = new Set(["/b/.venv/bin/kevin", "/a/venv/bin/kevin"]);
  const isExe = (file: string) => present.has(file);
  assert.deepEqual(resolveServerCommand(["kevin", "lsp"], ["/a", "/b"], isExe, "linux"), ["/a/venv/bin/kevin", "lsp"]);
  assert.deepEqual(resolveServerCommand(["kevin", "lsp"], ["/b", "/a"], isExe, "linux"), ["/b/.venv/bin/kevin", "lsp"]);
});

test("without a venv kevin comes from PATH; any other command is used as configured", () => {
  const none = () => false;
  assert.deepEqual(resolveServerCommand(["kevin", "lsp"], ["/a"], none, "linux"), ["kevin", "lsp"]);
  assert.deepEqual(resolveServerCommand([], ["/a"], none, "linux"), ["kevin", "lsp"]);
  const all = () => true;
  assert.deepEqual(resolveServerCommand(["/opt/kevin/bin/kevin", "lsp"], ["/a"], all, "linux"),
    ["/opt/kevin/bin/kevin", "lsp"]);
  assert.deepEqual(resolveServerCommand(["python3", "-m", "kevin_agent", "lsp"], ["/a"], all, "linux"),
    ["python3", "-m", "kevin_agent", "lsp"]);
});

test("on Windows the venv's Scripts/kevin.exe is looked for", () => {
  const seen: string[] = [];
  resolveServerCommand(["kevin", "lsp"], ["C:\\w"], (file) => { seen.push(file); return false; }, "win32");
  assert.ok(seen[0].endsWith("kevin.exe") && seen[0].includes("Scripts"), seen[0]);
});

test("baseUrl is sent; the old endpoint is read when baseUrl is unset, and named", () => {
  const set = (values: Record<string, unknown>) => (key: string) => values[key];
  assert.deepEqual(userSettings(set({ baseUrl: "http://a/v1", turns: 2 })),
    { values: { baseUrl: "http://a/v1", turns: 2 }, deprecated: [] });
  assert.deepEqual(userSettings(set({ endpoint: "http://old/v1" })),
    { values: { baseUrl: "http://old/v1" }, deprecated: ["endpoint"] });
  assert.deepEqual(userSettings(set({ endpoint: "http://old/v1", baseUrl: "http://new/v1" })).values,
    { baseUrl: "http://new/v1" });
  assert.deepEqual(userSettings(set({ model: "" })).values, {});
  assert.match(deprecationNote(["endpoint"]) ?? "", /kevin\.endpoint -> kevin\.baseUrl/);
  assert.equal(deprecationNote([]), undefined);
});
