// Kevin for VS Code: starts `kevin lsp` with vscode-languageclient and adds commands that run the
// server's kevin.* commands on the nn.Module class at the cursor. All logic lives in the server.
import * as fs from "fs";
import * as vscode from "vscode";
import {
  DidChangeConfigurationNotification,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  TransportKind,
} from "vscode-languageclient/node";
import { resolveServerCommand } from "./serverCommand";
import { deprecationNote, userSettings } from "./settings";

let client: LanguageClient | undefined;
let notedDeprecations = "";

/** Only the settings the user set (user, workspace or folder): defaults are left to the project's
 * kevin.toml / [tool.kevin] and the environment, which the server reads itself. */
function kevinSettings(): Record<string, unknown> {
  const config = vscode.workspace.getConfiguration("kevin");
  const { values, deprecated } = userSettings((key) => {
    const found = config.inspect(key);
    return found?.workspaceFolderValue ?? found?.workspaceValue ?? found?.globalValue;
  });
  const note = deprecationNote(deprecated);
  if (note && note !== notedDeprecations) {
    notedDeprecations = note;  // once per change, not on every configuration request
    void vscode.window.showWarningMessage(note);
  }
  return values;
}

function isExecutable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

function makeClient(): LanguageClient {
  const configured = vscode.workspace.getConfiguration("kevin").get<string[]>("serverCommand", ["kevin", "lsp"]);
  const folders = (vscode.workspace.workspaceFolders ?? []).map((folder) => folder.uri.fsPath);
  const [command, ...args] = resolveServerCommand(configured, folders, isExecutable);
  const serverOptions: ServerOptions = { command, args, transport: TransportKind.stdio };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: "file", language: "python" }],
    initializationOptions: { kevin: kevinSettings() },
    middleware: {
      workspace: {
        // workspace/configuration: answer with what the user set, never package.json defaults
        configuration: (params, token, next) =>
          params.items.some((item) => item.section === "kevin")
            ? params.items.map((item) => (item.section === "kevin" ? kevinSettings() : null))
            : next(params, token),
      },
    },
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
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration((change) => {
      if (change.affectsConfiguration("kevin") && client) {
        void client.sendNotification(DidChangeConfigurationNotification.type, {
          settings: { kevin: kevinSettings() },
        });
      }
    }),
  );
  client = makeClient();
  await client.start();
}

export async function deactivate(): Promise<void> {
  await client?.stop();
  client = undefined;
}
