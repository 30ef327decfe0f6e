import { basename } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PRODUCT, read, sources } from './sources.ts';

// Errors have one class per code, declared in their area's errors.ts with the kernel's
// errorClass: a code built inline in a route or a flow, or a class declared beside the code that
// throws it, is a code nobody can find, list or branch on. The product's own source is checked;
// specs and library users may build errors of their own.
const HOME = 'gateway/errors.ts';
const isErrorsFile = (file: string) => basename(file) === 'errors.ts';

/** Each line of `text` that builds a GatewayError inline, as `file:line`. */
function inlineErrors(file: string, text: string): string[] {
  return text.split('\n').flatMap((line, i) => (/new\s+GatewayError\s*\(/.test(line) ? [`${file}:${i + 1}`] : []));
}

/** The classes the errors.ts files declare: every error base a class elsewhere could extend. */
function errorClasses(files: readonly string[]): string[] {
  return files.filter(isErrorsFile).flatMap((file) => [...read(file).matchAll(/\bclass\s+(\w+)/g)].map((m) => m[1]!));
}

/**
 * Each line of `text` that declares an error class: one extending SluiceError or a class of
 * `bases`, or calling the kernel's errorClass, as `file:line`.
 */
function declaredErrors(file: string, text: string, bases: readonly string[]): string[] {
  const extending = new RegExp(`\\bextends\\s+(?:${['SluiceError', ...bases].join('|')})\\b`);
  return text
    .split('\n')
    .flatMap((line, i) => (extending.test(line) || /\berrorClass\s*\(/.test(line) ? [`${file}:${i + 1}`] : []));
}

describe('errors', () => {
  const files = PRODUCT.flatMap(sources);
  const bases = errorClasses(files);

  it('builds no GatewayError inline outside gateway/errors.ts', () => {
    const found = files.filter((file) => file !== HOME).flatMap((file) => inlineErrors(file, read(file)));
    expect(found).toEqual([]);
  });

  it('declares every error class in an errors.ts file', () => {
    const found = files
      .filter((file) => !isErrorsFile(file))
      .flatMap((file) => declaredErrors(file, read(file), bases));
    expect(found).toEqual([]);
  });

  it('the rules themselves see a planted case, and pass a class of errors.ts', () => {
    // A guard against a pattern that matches nothing.
    const planted = "export const x = () => new GatewayError('GW_PLANTED', 400, 'invalid_request_error', 'no');";
    expect(inlineErrors('gateway/planted.ts', `// a file\n${planted}\n`)).toEqual(['gateway/planted.ts:2']);
    expect(inlineErrors('gateway/fine.ts', "throw new InvalidJsonError('not JSON');")).toEqual([]);

    const declared = [
      '// a file',
      'export class PlantedError extends SluiceError {}',
      "export class FactoryError extends errorClass('RUNNER_PLANTED', 500, 'server_error') {}",
      'export class SubError extends GatewayError {}',
      "const made = errorClass('RUNNER_PLANTED', 500, 'server_error');",
      'class Plain extends Error {}',
      'export class Fine extends EventTarget {}',
    ].join('\n');
    expect(declaredErrors('runner/planted.ts', declared, bases)).toEqual([
      'runner/planted.ts:2',
      'runner/planted.ts:3',
      'runner/planted.ts:4',
      'runner/planted.ts:5',
    ]);
    // The bases are read from the errors.ts files, and the scan reaches the files that throw.
    expect(bases).toEqual(expect.arrayContaining(['SluiceError', 'GatewayError', 'BenchError', 'StoreFullError']));
    expect(files).toEqual(
      expect.arrayContaining(['gateway/detached/call-routes.ts', 'runner/engines/kinds.ts', 'placer/kernel/errors.ts']),
    );
    expect(
      files.filter(isErrorsFile).flatMap((file) => declaredErrors(file, read(file), bases)).length,
    ).toBeGreaterThan(50);
  });
});
