// Drives the Kevin extension in code-server with headless Chromium, as a user would: open the
// Python file from the Explorer, click the "Kevin: write CUDA kernel" code lens, watch the run's
// progress, screenshot the end-of-run question and click one of its buttons.
//
// Usage: node drive.mjs CONFIG.json   (written by test_vscode_e2e.py)
// Prints one JSON line (what was seen, with timings) as the last line of stdout; exit 0 when
// every step was reached, 1 otherwise (the JSON then carries "error" and a failure screenshot).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

const cfg = JSON.parse(readFileSync(process.argv[2], "utf8"));
const started = Date.now();
const result = { steps: {}, lenses: [], lensLines: [], progress: [], notifications: [] };
const step = (name) => { result.steps[name] = (Date.now() - started) / 1000; };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const addUnique = (list, items) => {
  for (const item of items) if (item && !list.includes(item)) list.push(item);
};

const LENSES = ".monaco-editor .codelens-decoration"; // one per line: "title | title"
const LENS = `${LENSES} a`; // one clickable lens
const TOAST = ".notifications-toasts .notification-list-item";
const STATUS = "#workbench\\.parts\\.statusbar";

async function texts(page, selector) {
  return (await page.locator(selector).allInnerTexts()).map((t) => t.trim().replace(/\s+/g, " "));
}

/** Record what the workbench shows now: code lenses, status bar progress, notification toasts. */
async function observe(page) {
  addUnique(result.lensLines, await texts(page, LENSES));
  addUnique(result.progress, (await texts(page, `${STATUS} .statusbar-item`)).filter((t) => t.includes("Kevin")));
  addUnique(result.notifications, await texts(page, `${TOAST} .notification-list-item-message`));
}

/** Poll until ``find`` returns something, observing the workbench meanwhile. */
async function until(page, what, find, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    await observe(page);
    const found = await find();
    if (found) return found;
    await sleep(150);
  }
  throw new Error(`timed out after ${timeoutMs / 1000}s waiting for ${what}`);
}

async function visibleToast(page, text) {
  const toast = page.locator(TOAST, { hasText: text }).first();
  return (await toast.isVisible()) ? toast : null;
}

const browser = await chromium.launchPersistentContext(cfg.profileDir, {
  executablePath: cfg.chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  viewport: { width: 1400, height: 900 },
});
let page;
let exitCode = 0;
try {
  page = browser.pages()[0] ?? (await browser.newPage());
  page.setDefaultTimeout(cfg.stepTimeoutMs);
  await page.goto(`${cfg.url}/?folder=${encodeURIComponent(cfg.folder)}`);
  await page.locator(".monaco-workbench").waitFor();
  step("workbench");

  // open the file from the Explorer (a real click on its row)
  const row = page.locator(`.explorer-folders-view .monaco-list-row[aria-label^="${cfg.file}"]`).first();
  await row.waitFor();
  await row.click();
  await page.locator(".monaco-editor .view-lines", { hasText: `class ${cfg.className}` }).first().waitFor();
  step("file open");

  // the lens appears once the extension is active and the server answered textDocument/codeLens
  const lens = page.locator(LENS, { hasText: "Kevin: write CUDA kernel" }).first();
  await lens.waitFor({ timeout: cfg.lensTimeoutMs });
  await sleep(500); // lenses settle (VS Code re-renders them after the first resolve)
  result.lenses = await texts(page, LENS);
  step("lens");
  // click the lens just above the class line (view zones are not in line order in the DOM)
  const classLine = await page.locator(".monaco-editor .view-line", { hasText: `class ${cfg.className}(` })
    .first().boundingBox();
  let target = null;
  for (const candidate of await page.locator(LENS, { hasText: "Kevin: write CUDA kernel" }).all()) {
    const box = await candidate.boundingBox();
    if (box && box.y < classLine.y && (!target || box.y > target.box.y)) target = { candidate, box };
  }
  if (!target) throw new Error(`no "Kevin: write CUDA kernel" lens above class ${cfg.className}`);
  result.clickedLensAboveClass = classLine.y - target.box.y;
  await target.candidate.click();
  step("lens clicked");

  const question = await until(page, "the end-of-run question",
    () => visibleToast(page, `vs eager for ${cfg.className}`), cfg.runTimeoutMs);
  step("question");
  result.question = {
    message: (await question.locator(".notification-list-item-message").innerText()).trim(),
    buttons: (await question.locator(".notification-list-item-buttons-container .monaco-button").allInnerTexts())
      .map((t) => t.trim()),
  };
  // let the toast finish fading in and the lenses show the finished run, then take the picture
  await until(page, "the finished run's lens", () => page.locator(LENS, { hasText: "ready: accept" }).count(),
    5000).catch(() => {}); // for the picture only (short: an Info toast hides after ~15 s)
  await sleep(800);
  result.screenshot = join(cfg.outDir, "vscode-accept.png");
  await page.screenshot({ path: result.screenshot });

  await question.locator(".monaco-button", { hasText: cfg.answer }).first().click();
  step("answered");
  const done = await until(page, `a notification containing "${cfg.afterAnswer}"`,
    () => visibleToast(page, cfg.afterAnswer), cfg.stepTimeoutMs);
  result.afterAnswer = (await done.locator(".notification-list-item-message").innerText()).trim();
  step("after answer");
} catch (err) {
  exitCode = 1;
  result.error = String(err && err.stack ? err.stack : err);
  if (page) {
    try {
      await observe(page);
      result.failureScreenshot = join(cfg.outDir, "failure.png");
      await page.screenshot({ path: result.failureScreenshot });
    } catch (inner) {
      result.error += `\n(failure screenshot: ${inner})`;
    }
  }
} finally {
  await browser.close().catch(() => {});
}
process.stdout.write(`\n${JSON.stringify(result)}\n`);
process.exit(exitCode);
