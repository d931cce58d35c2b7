// Kevin for VS Code: starts `kevin lsp` with vscode-languageclient and adds commands that run the
// server's kevin.* commands on the nn.Module class at the cursor. All logic lives in the server.
import * as vscode from "vscode";
import {
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  TransportKind,
} from "vscode-languageclient/node";

let client: LanguageClient | undefined;

const SETTINGS = ["backend", "endpoint", "model", "trajectories", "turns"] as const;

function kevinSettings(): Record<string, unknown> {
  const config = vscode.workspace.getConfiguration("kevin");
  const values: Record<string, unknown> = {};
  for (const key of SETTINGS) {
    values[key] = config.get(key);
  }
  return values;
}

function makeClient(): LanguageClient {
  const [command, ...args] = vscode.workspace
    .getConfiguration("kevin")
    .get<string[]>("serverCommand", ["kevin", "lsp"]);
  const serverOptions: ServerOptions = { command, args, transport: TransportKind.stdio };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: "file", language: "python" }],
    initializationOptions: { kevin: kevinSettings() },
    synchronize: { configurationSection: "kevin" },
  };
  return new LanguageClient("kevin", "Kevin", serverOptions, clientOptions);
}

/** The name of the nearest `class X` at or above the cursor. */
function classAtCursor(editor: vscode.TextEditor): string | undefined {
  for (let line = editor.selection.active.line; line >= 0; line--) {
    const match = /^\s*class\s+([A-Za-z_]\w*)/.exec(editor.document.lineAt(line).text);
    if (match) {
      return match[1];
    }
  }
  return undefined;
}

async function runAtCursor(serverCommand: string): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  if (!editor || !client) {
    return;
  }
  const className = classAtCursor(editor);
  if (!className) {
    void vscode.window.showWarningMessage("Kevin: put the cursor inside an nn.Module class.");
    return;
  }
  try {
    await vscode.commands.executeCommand(serverCommand, editor.document.uri.toString(), className);
  } catch (err) {
    void vscode.window.showErrorMessage(`Kevin: ${err instanceof Error ? err.message : String(err)}`);
  }
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const atCursor: Array<[string, string]> = [
    ["kevin.optimizeAtCursor", "kevin.optimize"],
    ["kevin.showDiffAtCursor", "kevin.showDiff"],
    ["kevin.acceptAtCursor", "kevin.accept"],
    ["kevin.discardAtCursor", "kevin.discard"],
    ["kevin.cancelAtCursor", "kevin.cancel"],
  ];
  for (const [name, serverCommand] of atCursor) {
    context.subscriptions.push(
      vscode.commands.registerCommand(name, () => runAtCursor(serverCommand)),
    );
  }
  context.subscriptions.push(
    vscode.commands.registerCommand("kevin.restartServer", async () => {
      await client?.stop();
      client = makeClient();
      await client.start();
    }),
  );
  client = makeClient();
  await client.start();
}

export async function deactivate(): Promise<void> {
  await client?.stop();
  client = undefined;
}
