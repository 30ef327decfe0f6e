import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';

// The product's source as the layer specs read it: file paths from the repository root, so a
// finding reads as `gateway/calls/agent.ts:12` wherever the specs run.

/** The repository root. */
export const root = normalize(join(dirname(fileURLToPath(import.meta.url)), '..', '..'));

/** The product's top-level folders (spec/ is not product). */
export const PRODUCT: readonly string[] = Object.freeze(['gateway', 'placer', 'runner', 'k6']);

/** Every .ts file below `dir` (a path from the root), as paths from the root. */
export function sources(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sources(path));
    else if (entry.name.endsWith('.ts')) out.push(path);
  }
  return out;
}

/** The text of `file`, a path from the root. */
export function read(file: string): string {
  return readFileSync(join(root, file), 'utf8');
}
