import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// Errors have one class (or named factory) per code, in their area's errors.ts: a code built
// inline in a route or a flow is a code nobody can find, list or branch on. The product's own
// source is checked; specs and library users may build a GatewayError of their own.
const root = normalize(join(dirname(fileURLToPath(import.meta.url)), '..', '..'));
const PRODUCT = ['gateway', 'placer', 'runner', 'k6'];
const HOME = 'gateway/errors.ts';

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sources(path));
    else if (entry.name.endsWith('.ts')) out.push(path);
  }
  return out;
}

/** Each line of `text` that builds a GatewayError inline, as `file:line`. */
function inlineErrors(file: string, text: string): string[] {
  return text
    .split('\n')
    .flatMap((line, i) => (/new\s+GatewayError\s*\(/.test(line) ? [`${file}:${i + 1}`] : []));
}

describe('errors', () => {
  it('builds no GatewayError inline outside gateway/errors.ts', () => {
    const found = PRODUCT.flatMap(sources)
      .filter((file) => file !== HOME)
      .flatMap((file) => inlineErrors(file, readFileSync(join(root, file), 'utf8')));
    expect(found).toEqual([]);
  });

  it('the rule itself sees a planted case, and passes a class of errors.ts', () => {
    // A guard against a pattern that matches nothing.
    const planted = "export const x = () => new GatewayError('GW_PLANTED', 400, 'invalid_request_error', 'no');";
    expect(inlineErrors('gateway/planted.ts', `// a file\n${planted}\n`)).toEqual(['gateway/planted.ts:2']);
    expect(inlineErrors('gateway/fine.ts', "throw new InvalidJsonError('not JSON');")).toEqual([]);
    // And the scan reaches the files the routes live in.
    expect(PRODUCT.flatMap(sources)).toContain('gateway/call-routes.ts');
  });
});
