// The "kevin" settings the extension sends the server. The endpoint is `kevin.baseUrl` (the CLI's
// --base-url, the config's base_url); the old `kevin.endpoint` is still read when `baseUrl` is
// unset, and named so the user can rename it. Pure (no vscode import): unit-tested under node.

export const SETTINGS = [
  "backend", "baseUrl", "model", "script", "trajectories", "turns", "policy", "sandbox", "cluster",
] as const;

/** Old setting name -> its name now. */
export const DEPRECATED: Record<string, string> = { endpoint: "baseUrl" };

/** What the user set for one key (undefined: not set). */
export type Lookup = (key: string) => unknown;

/**
 * The settings the user set, by their current names; `deprecated` lists the old names in use.
 * Unset and empty values are left out: defaults are the project's kevin.toml / [tool.kevin].
 */
export function userSettings(lookup: Lookup): { values: Record<string, unknown>; deprecated: string[] } {
  const values: Record<string, unknown> = {};
  const deprecated: string[] = [];
  for (const key of SETTINGS) {
    const value = lookup(key);
    if (value !== undefined && value !== "") {
      values[key] = value;
    }
  }
  for (const [old, now] of Object.entries(DEPRECATED)) {
    const value = lookup(old);
    if (value !== undefined && value !== "") {
      deprecated.push(old);
      if (values[now] === undefined) {
        values[now] = value;
      }
    }
  }
  return { values, deprecated };
}

/** The one-line note for deprecated names in use. */
export function deprecationNote(deprecated: readonly string[]): string | undefined {
  if (deprecated.length === 0) {
    return undefined;
  }
  const renames = deprecated.map((old) => `kevin.${old} -> kevin.${DEPRECATED[old]}`).join(", ");
  return `Kevin: rename the deprecated setting ${renames} (as the CLI's --base-url and the config's base_url).`;
}
