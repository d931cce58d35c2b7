// Which `kevin lsp` to start: the configured command, with a bare "kevin" (the default) resolved
// to the workspace's own virtual environment first, as the Neovim plugin does, so VS Code need not
// be started from an activated environment. Pure (no vscode import): unit-tested under node.
import * as path from "path";

/** Virtual-environment folders searched in each workspace folder, in order. */
export const VENVS = [".venv", "venv"];

/** Where `kevin` sits inside a virtual environment on this platform. */
export function venvKevin(venv: string, platform: string = process.platform): string {
  return platform === "win32" ? path.join(venv, "Scripts", "kevin.exe") : path.join(venv, "bin", "kevin");
}

/**
 * The server command: `configured` as is unless its program is the bare name "kevin"; then the
 * first `<folder>/.venv/bin/kevin` (or `venv/`) that `isExecutable` accepts, over the workspace
 * folders in order, with the configured arguments; else `configured` (found on PATH).
 */
export function resolveServerCommand(
  configured: readonly string[],
  folders: readonly string[],
  isExecutable: (file: string) => boolean,
  platform: string = process.platform,
): string[] {
  const [program, ...args] = configured.length > 0 ? configured : ["kevin", "lsp"];
  if (program !== "kevin") {
    return [program, ...args];
  }
  for (const folder of folders) {
    for (const venv of VENVS) {
      const found = venvKevin(path.join(folder, venv), platform);
      if (isExecutable(found)) {
        return [found, ...args];
      }
    }
  }
  return [program, ...args];
}
