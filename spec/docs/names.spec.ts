import { beforeAll, describe, expect, it } from 'vitest';
import {
  brokenLinks,
  codePattern,
  mismatchedEnvs,
  missingFileNames,
  missingPaths,
  namesOn,
  staleCodes,
  staleEnvs,
  staleFlags,
  staleMetrics,
  wrongCommandFlags,
  wrongStatuses,
} from './checks.ts';
import { parsePage, readPages } from './pages.ts';
import type { CommandNames } from './truth.ts';
import { commandNames, declaredStatuses, errorCodes, fileNames, productText, specText } from './truth.ts';

// Every flag, environment variable, metric, error code, repository path and link a docs page
// names exists as named, so the pages cannot drift from the code they describe. A finding reads
// `page:line name`.

const pages = readPages();
const source = productText();
const errorsPage = pages.find((page) => page.file === 'docs/errors.md')!;
/** The prefixes of errors.md's table of areas: | `GW_` | the gateway ... |. */
const prefixes = errorsPage.lines.flatMap((line) => /^\|\s*`([A-Z]+_)`\s*\|/.exec(line.text)?.[1] ?? []);
const codes = errorCodes(source, prefixes);

let names: CommandNames;
beforeAll(async () => {
  names = await commandNames();
});

describe('the docs pages', () => {
  it('name only flags a sluice command takes, the product passes on, or another program documents', () => {
    expect(staleFlags(pages, names, source)).toEqual([]);
  });

  it("give each sluice command only that command's flags", () => {
    expect(wrongCommandFlags(pages, names)).toEqual([]);
  });

  it('name only environment variables a command or the code reads', () => {
    expect(staleEnvs(pages, names, `${source}\n${specText()}`)).toEqual([]);
  });

  it("give each flag of a settings table the flag's own variable", () => {
    expect(mismatchedEnvs(pages, names)).toEqual([]);
  });

  it('name only metric families, series and labels a Prometheus page of the product shows', () => {
    expect(staleMetrics(pages, source)).toEqual([]);
  });

  it('name only error codes the product defines', () => {
    expect(staleCodes(pages, prefixes, codes, source)).toEqual([]);
  });

  it('name only repository files and folders that exist', () => {
    expect(missingPaths(pages)).toEqual([]);
  });

  it('name alone only files the repository has', () => {
    expect(missingFileNames(pages, fileNames())).toEqual([]);
  });

  it('link only to pages and headings that exist', () => {
    expect(brokenLinks(pages, pages)).toEqual([]);
  });
});

describe('docs/errors.md', () => {
  it('lists every error code the product defines', () => {
    const listed = namesOn([errorsPage], codePattern(prefixes));
    expect(codes.size).toBeGreaterThan(90);
    expect([...codes].filter((code) => !listed.has(code))).toEqual([]);
  });

  it('gives each code, on every page, the status its class declares', () => {
    const statuses = declaredStatuses(source);
    expect(statuses.get('GW_CALL_NOT_FOUND')).toEqual(new Set([404]));
    expect(wrongStatuses(pages, statuses)).toEqual([]);
    const planted = parsePage(
      'docs/planted.md',
      '| `GW_CALL_NOT_FOUND` | 410 | gone |\n| `GW_UNAUTHORIZED` | 401 | no |',
    );
    expect(wrongStatuses([planted], statuses)).toEqual(['docs/planted.md:1 GW_CALL_NOT_FOUND 410']);
  });

  it('has an area for the prefix of every code declared with errorClass', () => {
    expect(prefixes).toEqual(expect.arrayContaining(['GW_', 'RUNNER_', 'PLACER_', 'BATCH_', 'BENCH_', 'CLI_']));
    const declared = [...source.matchAll(/[eE]rrorClass\(\s*'([A-Z0-9_]+)'/g)].map((m) => m[1]!);
    expect(declared.length).toBeGreaterThan(90);
    expect(declared.filter((code) => !prefixes.some((prefix) => code.startsWith(prefix)))).toEqual([]);
  });
});

describe('the docs checks', () => {
  // A guard against a pattern that matches nothing: each check finds its planted name, and a
  // section of renames is read by none.
  const planted = parsePage(
    'docs/planted.md',
    [
      '# Planted',
      'Run `sluice gateway --allow-plain-http`, set `SLUICE_RUNNERS_COUNT`, read `sluice_calls_completed`.',
      'The code `GW_PLANTED_GONE` is in `gateway/detached/store/memory.ts`; see [x](#nowhere), [y](#after).',
      'The agent is `agent.ts` and `lb-agent.ts`, drawn in ![a chart](img/gone.svg); `npm start -- --engine x`.',
      '```console',
      '$ sluice runner --placer least-loaded \\',
      '    --gateway http://127.0.0.1:8080 | tee --append log',
      '```',
      '## Renamed metrics',
      '| `sluice_call_latency` | `sluice_call_overhead_seconds_bucket` | `sluice_runner_id` |',
      '## With `createGateway({ placer })`',
      '| `--runners` | `SLUICE_RUNNER_COUNT` | 2 |',
      '| `--runners` | `SLUICE_UP_RUNNERS` | 2 |',
      '<a id="kept"></a>',
      'See [z](#with-creategateway-placer-) and [k](#kept). Read `sluice_call_overhead_seconds_bucket`, `sluice_calls_completed_total` and `sluice_runner_id`.',
    ].join('\n'),
  );

  it('find the planted stale name of each kind, and only it', () => {
    expect(staleFlags([planted], names, source)).toEqual([
      'docs/planted.md:2 --allow-plain-http',
      'docs/planted.md:7 --append',
    ]);
    expect(wrongCommandFlags([planted], names)).toEqual([
      'docs/planted.md:6 runner --placer',
      'docs/planted.md:2 gateway --allow-plain-http',
      'docs/planted.md:4 up --engine',
    ]);
    expect(mismatchedEnvs([planted], names)).toEqual(['docs/planted.md:12 --runners SLUICE_RUNNER_COUNT']);
    expect(staleEnvs([planted], names, source)).toEqual([
      'docs/planted.md:2 SLUICE_RUNNERS_COUNT',
      'docs/planted.md:12 SLUICE_RUNNER_COUNT',
    ]);
    expect(staleMetrics([planted], source)).toEqual(['docs/planted.md:2 sluice_calls_completed']);
    expect(staleCodes([planted], prefixes, codes, source)).toEqual(['docs/planted.md:3 GW_PLANTED_GONE']);
    expect(missingPaths([planted])).toEqual(['docs/planted.md:3 gateway/detached/store/memory.ts']);
    expect(missingFileNames([planted], fileNames())).toEqual(['docs/planted.md:4 lb-agent.ts']);
    expect(brokenLinks([planted], [planted])).toEqual([
      'docs/planted.md:3 ](#nowhere)',
      'docs/planted.md:3 ](#after)',
      'docs/planted.md:4 ](img/gone.svg)',
    ]);
  });
});
