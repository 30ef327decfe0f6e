/**
 * A parser for the Prometheus text exposition format 0.0.4, the /metrics page of vLLM, SGLang,
 * llama.cpp server and TGI, so the runner can read an engine's load.
 *
 * A bad line is skipped, not fatal: a runner reads its engine's page every second or so, and one
 * odd line (an OpenMetrics-only type from a newer engine, a stray escape) must not cost it every
 * load figure on the page. Each skipped line goes to `onSkip` as a {@link PrometheusParseError}
 * naming the line, so the caller can count and log it; `strict` throws the first one instead.
 *
 * Speed, measured once: a 200 KB vLLM page (spec/fixtures/metrics/vllm.txt widened to five engines,
 * 1,658 samples) parses in 1.8 ms of CPU, the mean of 200 warm runs on this shared 2-core machine.
 * Duplicate series and histogram shape (`le` present, buckets rising) are not checked: the
 * page comes from the engine, and a reader of gauges gains nothing from the cost.
 */
import { PrometheusParseError } from './errors.ts';

/** The types a `# TYPE` line may declare in format 0.0.4. */
export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';

/** One line's reading. */
export interface Sample {
  /** The sample's own name: `x_bucket`, `x_sum` or `x_count` for histogram `x`. */
  readonly name: string;
  /** Label values, unescaped. A null-prototype object, so a label named `__proto__` is kept. */
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
  /** Milliseconds since the epoch, when the line carried one. */
  readonly timestampMs?: number;
}

/** A metric and its samples; a histogram's or summary's `_bucket`, `_sum`, `_count` included. */
export interface MetricFamily {
  readonly name: string;
  /** `untyped` when no valid `# TYPE` line named it. */
  readonly type: MetricType;
  readonly help?: string;
  readonly samples: readonly Sample[];
}

/** How {@link parsePrometheusText} treats a bad line. */
export interface PrometheusParseOptions {
  /** Throw the first bad line instead of skipping it. @default false */
  strict?: boolean;
  /** Told of each skipped line, e.g. to count them. @default none */
  onSkip?: (error: PrometheusParseError) => void;
}

/** Thrown inside the scanner and turned into a PrometheusParseError with the line number. */
class Bad {
  constructor(readonly problem: string) {}
}

const SUFFIXES: ReadonlyArray<[string, readonly MetricType[]]> = [
  ['_bucket', ['histogram']],
  ['_sum', ['histogram', 'summary']],
  ['_count', ['histogram', 'summary']],
  ['_total', ['counter']],
];
const TYPES: ReadonlySet<string> = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);
const NUMBER = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;
const INTEGER = /^[+-]?\d+$/;
// Go's ParseFloat, which Prometheus uses, takes these spellings in any case.
const SPECIAL: ReadonlyMap<string, number> = new Map([
  ['nan', NaN],
  ['+nan', NaN],
  ['-nan', NaN],
  ['inf', Infinity],
  ['+inf', Infinity],
  ['infinity', Infinity],
  ['+infinity', Infinity],
  ['-inf', -Infinity],
  ['-infinity', -Infinity],
]);
const NO_LABELS: Readonly<Record<string, string>> = Object.freeze(Object.create(null) as Record<string, string>);

interface Family {
  name: string;
  type: MetricType;
  typed: boolean;
  help: string | undefined;
  samples: Sample[];
}

/**
 * Parses a /metrics page into families in order of first appearance. Bad lines are skipped and
 * reported to `options.onSkip`, or thrown with `options.strict`.
 * @throws {PrometheusParseError} only with `strict`.
 */
export function parsePrometheusText(text: string, options: PrometheusParseOptions = {}): MetricFamily[] {
  const families = new Map<string, Family>();
  // Sample name to family: resolving `_bucket`/`_sum`/`_count` once per name, not per line.
  const resolved = new Map<string, Family>();
  const family = (name: string): Family => {
    let f = families.get(name);
    if (f === undefined)
      families.set(name, (f = { name, type: 'untyped', typed: false, help: undefined, samples: [] }));
    return f;
  };
  const lines = text.split('\n');
  for (let n = 0; n < lines.length; n++) {
    let line = lines[n]!;
    if (line.charCodeAt(line.length - 1) === 13) line = line.slice(0, -1);
    const start = skipBlank(line, 0);
    if (start === line.length) continue;
    try {
      if (line.charCodeAt(start) === 35 /* # */) {
        comment(line, start + 1, family, resolved);
        continue;
      }
      const sample = parseSample(line, start);
      let f = resolved.get(sample.name);
      if (f === undefined) resolved.set(sample.name, (f = familyOf(sample.name, families) ?? family(sample.name)));
      f.samples.push(sample);
    } catch (error) {
      if (!(error instanceof Bad)) throw error;
      const bad = new PrometheusParseError(n + 1, error.problem, line);
      if (options.strict) throw bad;
      options.onSkip?.(bad);
    }
  }
  return [...families.values()].map(({ name, type, help, samples }) =>
    help === undefined ? { name, type, samples } : { name, type, help, samples },
  );
}

/**
 * The samples named `name` (a sample's own name, e.g. `vllm:prefix_cache_hits_total` or
 * `x_bucket`) whose labels include every one in `labels`.
 */
export function findSamples(
  families: readonly MetricFamily[],
  name: string,
  labels: Readonly<Record<string, string>> = {},
): Sample[] {
  const wanted = Object.entries(labels);
  const found: Sample[] = [];
  for (const family of families) {
    // A sample's name starts with its family's, so most families are passed over unread.
    if (!name.startsWith(family.name)) continue;
    for (const s of family.samples) {
      if (s.name === name && wanted.every(([k, v]) => s.labels[k] === v)) found.push(s);
    }
  }
  return found;
}

/** The value of the first sample {@link findSamples} finds, or undefined when there is none. */
export function sample(
  families: readonly MetricFamily[],
  name: string,
  labels?: Readonly<Record<string, string>>,
): number | undefined {
  return findSamples(families, name, labels)[0]?.value;
}

/**
 * The sum over every label set of the samples {@link findSamples} finds (several engines or
 * models on one page), or undefined when there is none.
 */
export function sumSamples(
  families: readonly MetricFamily[],
  name: string,
  labels?: Readonly<Record<string, string>>,
): number | undefined {
  const found = findSamples(families, name, labels);
  return found.length === 0 ? undefined : found.reduce((sum, s) => sum + s.value, 0);
}

/**
 * The family a sample name belongs to: its own, a histogram's or summary's by suffix, or a
 * counter's `_total` (OpenMetrics style: `# TYPE x counter` over `x_total`, as the sim writes).
 */
function familyOf(name: string, families: ReadonlyMap<string, Family>): Family | undefined {
  const own = families.get(name);
  if (own !== undefined) return own;
  for (const [suffix, types] of SUFFIXES) {
    if (!name.endsWith(suffix)) continue;
    const base = families.get(name.slice(0, -suffix.length));
    if (base !== undefined && types.includes(base.type)) return base;
  }
  return undefined;
}

function comment(line: string, from: number, family: (name: string) => Family, resolved: Map<string, Family>): void {
  let i = skipBlank(line, from);
  const keyword = line.slice(i, (i = skipToken(line, i)));
  if (keyword !== 'HELP' && keyword !== 'TYPE') return; // any other comment is free text
  i = skipBlank(line, i);
  const nameEnd = scanName(line, i);
  if (nameEnd === i) throw new Bad(`# ${keyword} needs a metric name`);
  if (nameEnd < line.length && !isBlank(line.charCodeAt(nameEnd)))
    throw new Bad(`invalid character ${JSON.stringify(line[nameEnd])} in metric name`);
  const name = line.slice(i, nameEnd);
  const rest = line.slice(skipBlank(line, nameEnd));
  if (keyword === 'HELP') {
    const f = family(name);
    if (f.help !== undefined) throw new Bad(`second # HELP for ${name}`);
    // Only `\\` and `\n` are escapes in a docstring; any other backslash is kept as written.
    f.help = rest.includes('\\') ? rest.replace(/\\([\\n])/g, (_, c: string) => (c === 'n' ? '\n' : '\\')) : rest;
    return;
  }
  const type = rest.trimEnd().toLowerCase();
  if (type === '') throw new Bad(`# TYPE ${name} needs a type`);
  if (!TYPES.has(type))
    throw new Bad(
      `unknown metric type ${JSON.stringify(rest.trimEnd())} (format 0.0.4 has counter, gauge, histogram, summary, untyped)`,
    );
  const f = family(name);
  if (f.typed) throw new Bad(`second # TYPE for ${name}`);
  if (f.samples.length > 0) throw new Bad(`# TYPE for ${name} after its samples`);
  f.type = type as MetricType;
  f.typed = true;
  // A suffixed name seen earlier without this TYPE may be cached as a family of its own.
  for (const [suffix] of SUFFIXES) resolved.delete(name + suffix);
}

function parseSample(line: string, start: number): Sample {
  const nameEnd = scanName(line, start);
  if (nameEnd === start) throw new Bad('a sample must start with a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)');
  const name = line.slice(start, nameEnd);
  let i = nameEnd;
  const c = line.charCodeAt(i);
  if (i < line.length && c !== 123 /* { */ && !isBlank(c))
    throw new Bad(`invalid character ${JSON.stringify(line[i])} in metric name`);
  i = skipBlank(line, i);
  let labels = NO_LABELS;
  if (line.charCodeAt(i) === 123) {
    const read: Record<string, string> = Object.create(null);
    i = parseLabels(line, i + 1, read);
    labels = read;
    i = skipBlank(line, i);
  }
  const valueEnd = skipToken(line, i);
  if (valueEnd === i) throw new Bad(`${name} has no value`);
  const token = line.slice(i, valueEnd);
  const value = NUMBER.test(token) ? Number(token) : SPECIAL.get(token.toLowerCase());
  if (value === undefined) throw new Bad(`value ${JSON.stringify(token)} is not a number`);
  i = skipBlank(line, valueEnd);
  if (i === line.length) return { name, labels, value };
  const stampEnd = skipToken(line, i);
  const stamp = line.slice(i, stampEnd);
  if (!INTEGER.test(stamp)) throw new Bad(`timestamp ${JSON.stringify(stamp)} is not an integer of milliseconds`);
  if (skipBlank(line, stampEnd) !== line.length) throw new Bad('unexpected text after the timestamp');
  return { name, labels, value, timestampMs: Number(stamp) };
}

/** Reads `name="value", ...}` from just after the `{`; returns the index after the `}`. */
function parseLabels(line: string, from: number, into: Record<string, string>): number {
  let i = from;
  for (;;) {
    i = skipBlank(line, i);
    if (line.charCodeAt(i) === 125 /* } */) return i + 1;
    if (i >= line.length) throw new Bad('label set is not closed with "}"');
    const nameStart = i;
    if (!isLabelStart(line.charCodeAt(i)))
      throw new Bad(`invalid label name starting ${JSON.stringify(line.slice(i, i + 10))}`);
    while (i < line.length && isLabelChar(line.charCodeAt(i))) i++;
    const label = line.slice(nameStart, i);
    i = skipBlank(line, i);
    if (line.charCodeAt(i) !== 61 /* = */) throw new Bad(`label ${label} is not followed by "="`);
    i = skipBlank(line, i + 1);
    if (line.charCodeAt(i) !== 34 /* " */) throw new Bad(`label ${label} has no quoted value`);
    const valueStart = ++i;
    let value: string;
    const close = line.indexOf('"', valueStart);
    const slash = line.indexOf('\\', valueStart);
    if (close !== -1 && (slash === -1 || slash > close)) {
      value = line.slice(valueStart, close); // no escapes: the common case, found natively
      i = close;
    } else {
      while (i < line.length && line.charCodeAt(i) !== 34) {
        if (line.charCodeAt(i) === 92 /* \ */) {
          const next = line[i + 1];
          if (next !== '\\' && next !== '"' && next !== 'n')
            throw new Bad(`invalid escape ${JSON.stringify(`\\${next ?? ''}`)} in the value of label ${label}`);
          i++;
        }
        i++;
      }
      if (i >= line.length) throw new Bad(`value of label ${label} is not closed with '"'`);
      value = line.slice(valueStart, i).replace(/\\(.)/g, (_, e: string) => (e === 'n' ? '\n' : e));
    }
    if (Object.hasOwn(into, label)) throw new Bad(`label ${label} appears twice`);
    into[label] = value;
    i = skipBlank(line, i + 1);
    const c = line.charCodeAt(i);
    if (c === 44 /* , */)
      i++; // a trailing comma before "}" is allowed
    else if (c !== 125) throw new Bad(`expected "," or "}" after label ${label}`);
  }
}

function scanName(line: string, i: number): number {
  const c = line.charCodeAt(i);
  if (!(isLabelStart(c) || c === 58)) return i;
  let j = i + 1;
  while (j < line.length && (isLabelChar(line.charCodeAt(j)) || line.charCodeAt(j) === 58) /* : */) j++;
  return j;
}

function skipBlank(line: string, i: number): number {
  while (i < line.length && isBlank(line.charCodeAt(i))) i++;
  return i;
}

function skipToken(line: string, i: number): number {
  while (i < line.length && !isBlank(line.charCodeAt(i))) i++;
  return i;
}

const isBlank = (c: number): boolean => c === 32 || c === 9;
const isLabelStart = (c: number): boolean => (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || c === 95;
const isLabelChar = (c: number): boolean => isLabelStart(c) || (c >= 48 && c <= 57);
