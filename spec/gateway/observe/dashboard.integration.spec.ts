/**
 * The dashboard in a real browser: a gateway and two runners over simulated engines as real
 * processes on 127.0.0.1, headless Chromium (Debian's `chromium`, driven by playwright-core)
 * on GET /dashboard. The operator types the token in; the page shows both runners, a runner
 * killed with SIGKILL turns unreachable on the page within seconds, the calls counter moves
 * with traffic, a batch shows in its panel, the page fits a phone's width and is keyboard navigable, and no console error
 * or page error happens anywhere. Screenshots go to a temporary folder whose path is printed.
 *
 * The runners are static ones probed every 200 ms (`--status-interval 200ms`): a killed runner
 * refuses the next probe's connection and is unreachable at once, where a registered one would
 * wait out its missed heartbeats first.
 */
import { existsSync } from 'node:fs';
import { copyFile, mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import { chromium } from 'playwright-core';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPERATOR_TOKEN, chatBody, eventually, postJson, startFleet } from '../../support/fleet.ts';
import type { Fleet } from '../../support/fleet.ts';

/** Debian's chromium; .ci/run installs it where it is missing. */
const CHROMIUM = '/usr/bin/chromium';
/** Set to write the README's screenshot, docs/img/dashboard.png, from this run. */
const README_SHOT = process.env.SLUICE_DASHBOARD_README_SHOT === '1';

let fleet: Fleet;
let browser: Browser;
let page: Page;
let shots: string;
/** Console messages of type error and uncaught page errors, as they happen. */
const problems: string[] = [];

beforeAll(async () => {
  // A missing browser fails the spec, never skips it: a skipped browser test hides a broken page.
  if (!existsSync(CHROMIUM))
    throw new Error(`${CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium), as .ci/run does`);
  shots = await mkdtemp(join(tmpdir(), 'sluice-dashboard-'));
  fleet = await startFleet({ nodes: 2, gatewayArgs: ['--status-interval', '200ms'] });
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true });
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('console', (message) => {
    if (message.type() === 'error') problems.push(`console: ${message.text()} (${message.location().url})`);
  });
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
}, 90_000);

afterAll(async () => {
  // The browser first: a page still polling a stopped gateway would log refused connections.
  await browser?.close();
  await fleet?.stop();
});

/** The text of a runner's cell on the page, by column header; undefined while there is no row. */
async function runnerCell(id: string, column: string): Promise<string | undefined> {
  return page.evaluate(
    ({ id, column }) => {
      const w = globalThis as any;
      const table = w.document.getElementById('runners');
      const index = [...table.tHead.rows[0].cells].findIndex((th: any) => th.textContent === column);
      const row = table.querySelector(`tr[data-runner="${w.CSS.escape(id)}"]`);
      return (row?.cells[index]?.textContent as string | undefined) ?? undefined;
    },
    { id, column },
  );
}

const text = (selector: string) => page.locator(selector).innerText();
/** A static runner's id in the pool: its own, as its status says it. */
const runnerId = (index: number) => `runner-${index + 1}`;

async function shoot(name: string): Promise<string> {
  const path = join(shots, name);
  // Without the focus ring a keyboard step left, and as tall as the content.
  await page.evaluate(() => (globalThis as any).document.activeElement?.blur());
  await page.locator('body').screenshot({ path });
  console.log(`dashboard screenshot: ${path}`);
  return path;
}

describe('the dashboard in a browser', () => {
  it('asks for the operator token, keeps it for the tab only, and shows both runners live', async () => {
    await page.goto(`${fleet.gateway.url}/dashboard`);
    await page.locator('#token').waitFor({ state: 'visible' });
    // The field has the focus already: typing and Enter are all an operator needs.
    expect(await page.evaluate(() => (globalThis as any).document.activeElement?.id)).toBe('token');
    await page.keyboard.type(OPERATOR_TOKEN);
    await page.keyboard.press('Enter');
    await eventually(
      async () =>
        (await runnerCell(runnerId(0), 'State')) === 'live' && (await runnerCell(runnerId(1), 'State')) === 'live',
      10_000,
      'both runners live on the page',
    );
    expect(await page.locator('#runners tbody tr').count()).toBe(2);
    expect(await runnerCell(runnerId(0), 'Models')).toBe('sim-small');
    expect(await runnerCell(runnerId(0), 'Breaker')).toBe('closed');
    expect(await runnerCell(runnerId(0), 'Health')).toBe('ok');
    // Load is in-flight calls over the slots the runner last reported.
    expect(await runnerCell(runnerId(1), 'Load')).toMatch(/^0 \/ [1-9]\d*$/);
    expect(
      await page.evaluate(() => (globalThis as any).sessionStorage.getItem('sluice.dashboard.operatorToken')),
    ).toBe(OPERATOR_TOKEN);
    // Not in storage that outlives the tab.
    expect(await page.evaluate(() => (globalThis as any).localStorage.length)).toBe(0);
    // Never in the address bar.
    expect(page.url()).not.toContain(OPERATOR_TOKEN);
  });

  it('moves the calls counter after more calls, and shows their time to first token and the detached calls', async () => {
    const send = async (n: number) => {
      for (let i = 0; i < n; i++)
        expect((await postJson(`${fleet.gateway.url}/v1/chat/completions`, chatBody({ stream: true }))).status).toBe(
          200,
        );
    };
    await eventually(async () => await page.locator('#calls-data').isVisible(), 5000, 'the calls panel');
    const before = Number((await text('#calls-total')).replace(/,/g, ''));
    await send(6);
    await eventually(
      async () => Number((await text('#calls-total')).replace(/,/g, '')) >= before + 6,
      5000,
      'the calls counter to move by 6',
    );
    // The streamed calls' first tokens, as a chart per model.
    await eventually(
      async () => (await text('#ttft')).includes('sim-small'),
      5000,
      'the time to first token of sim-small',
    );
    expect(await page.locator('#ttft svg').count()).toBeGreaterThan(0);
    // A detached call, counted on its way through.
    expect(
      (await postJson(`${fleet.gateway.url}/v1/chat/completions`, chatBody(), { prefer: 'respond-async' })).status,
    ).toBe(202);
    await eventually(async () => /accepted\s+1\b/.test(await text('#detached')), 5000, 'the detached call counted');
  });

  it('shows the batches panel: a batch run here is counted completed, with its lines', async () => {
    const client = new OpenAI({ baseURL: `${fleet.gateway.url}/v1`, apiKey: 'sk-test-dummy', maxRetries: 0 });
    const body = { model: 'sim-small', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };
    const text3 = [0, 1, 2]
      .map((i) => JSON.stringify({ custom_id: `c${i}`, method: 'POST', url: '/v1/chat/completions', body }))
      .join('\n');
    const file = await client.files.create({ file: await toFile(Buffer.from(text3), 'in.jsonl'), purpose: 'batch' });
    await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    await eventually(async () => /completed\s+1\b/.test(await text('#batches')), 10_000, 'the batch counted completed');
    expect(await text('#batches')).toMatch(/lines waiting\s+0\b/);
  });

  it('shows the cache truth panel, saying so while no runner feeds this gateway its cache', async () => {
    await eventually(
      async () => (await text('#cache')).includes('No runner feeds its cache to this gateway.'),
      5000,
      'the cache truth panel',
    );
    expect(await text('#cache-count')).toBe('(0 of 0 feeds known)');
  });

  it('keeps the token across a reload, and can be worked from the keyboard with the focus visible', async () => {
    await page.reload();
    await eventually(
      async () => (await runnerCell(runnerId(0), 'State')) === 'live',
      5000,
      'the runners again, without the token asked for',
    );
    expect(await page.locator('#login').isHidden()).toBe(true);
    await page.keyboard.press('Tab');
    const focused = await page.evaluate(() => {
      const w = globalThis as any;
      const el = w.document.activeElement;
      return { id: el.id as string, outline: w.getComputedStyle(el).outlineStyle as string };
    });
    expect(focused.id).toBe('forget');
    expect(focused.outline).not.toBe('none');
    // Then into the runners' table, whose region scrolls on a narrow screen.
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => (globalThis as any).document.activeElement?.getAttribute('aria-labelledby'))).toBe(
      'runners-title',
    );
  });

  it('fits a phone: the page itself never scrolls sideways', async () => {
    await shoot('dashboard-1280.png');
    if (README_SHOT)
      await copyFile(join(shots, 'dashboard-1280.png'), new URL('../../../docs/img/dashboard.png', import.meta.url));
    await page.setViewportSize({ width: 390, height: 844 });
    expect(
      await page.evaluate(() => (globalThis as any).document.documentElement.scrollWidth as number),
    ).toBeLessThanOrEqual(390);
    await shoot('dashboard-390.png');
    await page.setViewportSize({ width: 1280, height: 900 });
  });

  it('shows a runner killed with SIGKILL as unreachable within a few seconds', async () => {
    const killedAt = Date.now();
    fleet.nodes[1]!.runner.child.kill('SIGKILL');
    await eventually(
      async () => (await runnerCell(runnerId(1), 'State')) === 'unreachable',
      5000,
      'the killed runner unreachable on the page',
    );
    console.log(`dashboard: the killed runner was unreachable on the page ${Date.now() - killedAt} ms after SIGKILL`);
    expect(await runnerCell(runnerId(1), 'Health')).toBe('down');
    expect(await runnerCell(runnerId(0), 'State')).toBe('live');
    await shoot('dashboard-unreachable.png');
  });

  it('forgets the token on request, and asks again for one the gateway refuses', async () => {
    // A page of its own: Chromium logs the refused reads (401) as console errors, expected here only.
    const other = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const errors: string[] = [];
    other.on(
      'console',
      (message) => message.type() === 'error' && errors.push(`console: ${message.text()} (${message.location().url})`),
    );
    other.on('pageerror', (error) => errors.push(`page error: ${error.message}`));
    try {
      await other.goto(`${fleet.gateway.url}/dashboard`);
      await other.locator('#token').fill(OPERATOR_TOKEN);
      await other.locator('#token').press('Enter');
      await other.locator('#forget').click();
      await other.locator('#token').waitFor({ state: 'visible' });
      expect(await other.evaluate(() => (globalThis as any).sessionStorage.length)).toBe(0);
      await other.locator('#token').fill('not-the-operator-token-0123456789');
      await other.locator('#token').press('Enter');
      await eventually(
        async () => (await other.locator('#login-error').innerText()).includes('refused the token'),
        5000,
        'the refusal on the page',
      );
      expect(await other.locator('#panels').isHidden()).toBe(true);
      expect(await other.evaluate(() => (globalThis as any).sessionStorage.length)).toBe(0);
      expect(errors.length).toBeGreaterThan(0);
      expect(errors.filter((line) => !/^console: Failed to load resource: .* 401 /.test(line))).toEqual([]);
    } finally {
      await other.close();
    }
  });

  it('had no console error and no page error all along', () => {
    expect(problems).toEqual([]);
  });
});
