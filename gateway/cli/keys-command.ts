/**
 * `sluice keys new --name N [--models a,b] [--requests-per-minute R] ...`: makes a client key
 * offline and prints it once, with the line to add to the keys file (--keys), which holds only
 * the key's SHA-256. The token is printed to stdout and nowhere else: not logged, not stored.
 */
import { checkKeySpec, hashToken, keyIdOf, newKeyToken } from '../access/keys.ts';
import { LIMIT_FIELDS } from '../access/limits.ts';
import type { Command } from './command.ts';
import { logFormat } from './command.ts';
import { SettingsError } from './settings.ts';

/** The one-shot `keys` command. */
export const keys: Command = {
  summary: 'make a client key: prints the key once and its keys-file entry (sluice keys new --name N)',
  args: ' new',
  oneShot: true,
  // A key's name and models are not the runner's or the gateway's: SLUICE_KEYS_NAME.
  envPrefix: 'KEYS',
  settings: [
    { key: 'name', type: 'string', description: "the key's name, shown in logs and in GET /v1/keys", required: true },
    {
      key: 'models',
      type: 'list',
      description: 'models the key may call (comma-separated); every model when not given',
    },
    { key: 'requestsPerMinute', type: 'integer', description: 'calls per sliding minute; unlimited when not given' },
    { key: 'tokensPerMinute', type: 'integer', description: 'tokens per sliding minute; unlimited when not given' },
    { key: 'concurrentCalls', type: 'integer', description: 'calls running at once; unlimited when not given' },
    {
      key: 'storedBytes',
      type: 'integer',
      description: 'bytes of detached results kept at once; unlimited when not given',
    },
    {
      key: 'defaultMaxTokens',
      type: 'integer',
      description:
        'with --tokens-per-minute: the max_tokens given to a call that names none (and what it is reserved at)',
      defaultText: '4096',
    },
    logFormat,
  ],
  async run({ values, positionals }) {
    if (positionals.length !== 1 || positionals[0] !== 'new')
      throw new SettingsError(`usage: sluice keys new --name N (got ${JSON.stringify(positionals.join(' '))})`);
    process.stdout.write(newKeyText(values, newKeyToken()));
    return async () => {};
  },
};

/**
 * What `sluice keys new` prints for `token`: the key, then the keys-file entry.
 * @throws SettingsError naming each bad setting.
 */
export function newKeyText(values: Record<string, unknown>, token: string): string {
  const limits: Record<string, unknown> = {};
  for (const field of LIMIT_FIELDS) if (values[field] !== undefined) limits[field] = values[field];
  const problems: string[] = [];
  const spec = checkKeySpec(
    '--',
    { name: values.name, ...(values.models === undefined ? {} : { models: values.models }), limits },
    problems,
  );
  if (!spec) throw new SettingsError(`sluice keys new: ${problems.map((p) => p.replace(/^--: /, '')).join('; ')}`);
  const digest = hashToken(token);
  const entry = {
    name: spec.name,
    hash: `sha256:${digest}`,
    ...(spec.models ? { models: spec.models } : {}),
    ...(Object.keys(spec.limits ?? {}).length > 0 ? { limits: spec.limits } : {}),
  };
  return [
    `key (shown once; give it to the client, keep no copy): ${token}`,
    `id: ${keyIdOf(digest)}`,
    'add this entry to the keys file (--keys):',
    JSON.stringify(entry),
    '',
  ].join('\n');
}
