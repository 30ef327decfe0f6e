/** runner/protocol/registration.ts: the registration and heartbeat bodies, their checks, and what a gateway's answer says. */
import { describe, expect, it } from 'vitest';
import {
  ORDER_LIMITS,
  WIRE_ID_PATTERN,
  gatewayAnswerKind,
  parseEngineOrder,
  parseHeartbeat,
  parseRegistration,
} from '../../../runner/protocol/index.ts';

const load = { slotsInUse: 1, slots: 4, queue: 0, models: {} };
const registration = {
  id: 'r-1',
  url: 'http://10.0.0.5:9000',
  version: '1.2.3',
  engines: [],
  models: ['m1'],
  slots: 4,
  gpus: null,
  ready: true,
  load,
};

describe('WIRE_ID_PATTERN', () => {
  it.each(['r1', 'node-7.gpu:0', 'A_b', 'x'.repeat(128)])('takes %j', (id) =>
    expect(WIRE_ID_PATTERN.test(id)).toBe(true),
  );
  it.each(['', 'x'.repeat(129), 'has space', 'slash/id', 'ü'])('refuses %j', (id) =>
    expect(WIRE_ID_PATTERN.test(id)).toBe(false),
  );
});

describe('parseRegistration', () => {
  it('takes a well-formed body, filling ready and version for older runners', () => {
    expect(parseRegistration(registration)).toEqual({ kind: 'ok', value: registration });
    // Every field at its limit is taken; fields the wire does not know are dropped.
    const atLimits = {
      ...registration,
      url: `http://10.0.0.5:9000/${'a'.repeat(2048 - 'http://10.0.0.5:9000/'.length)}`,
      models: Array.from({ length: 256 }, (_, i) => `${i}`.padEnd(256, 'm')),
      slots: 65_536,
      engines: Array.from({ length: 16 }, () => ({
        kind: 'sim',
        url: 'http://127.0.0.1:1',
        models: ['m1'],
        state: 'ready',
      })),
      gpus: { source: 'none', gpus: [], reason: 'none' },
      load: { ...load, kvCacheUsage: 1, models: { m1: { running: 1, waiting: 0 } } },
    };
    expect(parseRegistration({ ...atLimits, extra: 'dropped' })).toEqual({ kind: 'ok', value: atLimits });
    const { ready: _r, version: _v, ...older } = registration;
    expect(parseRegistration(older)).toEqual({ kind: 'ok', value: { ...older, ready: true, version: 'unknown' } });
  });

  it.each<[string, unknown, RegExp]>([
    ['not an object', 'hello', /must be a JSON object/],
    ['null', null, /must be a JSON object/],
    [
      'a bad id',
      { ...registration, id: 'no spaces' },
      /id must be 1-128 letters, digits or \._:- characters, got "no spaces"/,
    ],
    ['a non-http url', { ...registration, url: 'ftp://x' }, /url must be an http\(s\) URL, got "ftp:\/\/x"/],
    ['an unparsable url', { ...registration, url: 'not a url' }, /url must be an http\(s\) URL/],
    ['models not a list', { ...registration, models: 'm1' }, /models must be a list/],
    ['no load', { ...registration, load: undefined }, /load must carry numeric slotsInUse and slots/],
    [
      'a load without slots',
      { ...registration, load: { slotsInUse: 1 } },
      /load must carry numeric slotsInUse and slots/,
    ],
    ['an array', [registration], /must be a JSON object/],
    [
      'a url with credentials',
      { ...registration, url: 'http://user:pass@10.0.0.5:9000' },
      /^registration url must not carry credentials$/,
    ],
    [
      'a url with a query',
      { ...registration, url: 'http://10.0.0.5:9000/?x=1' },
      /url must not have a query or fragment/,
    ],
    [
      'a url with an empty query',
      { ...registration, url: 'http://10.0.0.5:9000/?' },
      /url must not have a query or fragment/,
    ],
    [
      'a url with a fragment',
      { ...registration, url: 'http://10.0.0.5:9000/#f' },
      /url must not have a query or fragment/,
    ],
    [
      'a url too long',
      { ...registration, url: `http://10.0.0.5:9000/${'a'.repeat(2048)}` },
      /url must be at most 2048 characters, got 2069/,
    ],
    ['a url that is not a string', { ...registration, url: 7 }, /url must be an http\(s\) URL, got 7/],
    [
      'an empty model name',
      { ...registration, models: ['m1', ''] },
      /registration models\[1\] must be a model name of 1 to 256 characters on one line, got ""/,
    ],
    [
      'a model name too long',
      { ...registration, models: ['m'.repeat(257)] },
      /models\[0\] must be a model name of 1 to 256 characters/,
    ],
    ['a model name that is not a string', { ...registration, models: [7] }, /models\[0\] must be a model name/],
    [
      'a model name over two lines',
      { ...registration, models: ['m1\n{"level":"error"}'] },
      /models\[0\] must be a model name of 1 to 256 characters on one line/,
    ],
    [
      'too many models',
      { ...registration, models: Array.from({ length: 257 }, (_, i) => `m${i}`) },
      /models must list at most 256 models, got 257/,
    ],
    ['engines not a list', { ...registration, engines: {} }, /engines must be a list/],
    [
      'too many engines',
      {
        ...registration,
        engines: Array.from({ length: 17 }, () => ({
          kind: 'sim',
          url: 'http://127.0.0.1:1',
          models: [],
          state: 'ready',
        })),
      },
      /at most 16 engines, got 17/,
    ],
    [
      'an engine with a bad url',
      { ...registration, engines: [{ kind: 'sim', url: 'file:///etc', models: [], state: 'ready' }] },
      /engines\[0\]\.url must be an http\(s\) URL/,
    ],
    [
      'an engine with a bad model',
      { ...registration, engines: [{ kind: 'sim', url: 'http://127.0.0.1:1', models: [''], state: 'ready' }] },
      /engines\[0\]\.models\[0\] must be a model name/,
    ],
    [
      'an engine kind too long',
      { ...registration, engines: [{ kind: 'k'.repeat(65), url: 'http://127.0.0.1:1', models: [], state: 'ready' }] },
      /engines\[0\]\.kind must be a string of at most 64 characters/,
    ],
    ['no slots', { ...registration, slots: undefined }, /slots must be a whole number from 1 to 65536, got undefined/],
    ['zero slots', { ...registration, slots: 0 }, /slots must be a whole number from 1 to 65536, got 0/],
    ['too many slots', { ...registration, slots: 65_537 }, /slots must be a whole number from 1 to 65536, got 65537/],
    ['fractional slots', { ...registration, slots: 1.5 }, /slots must be a whole number/],
    ['gpus that are a list', { ...registration, gpus: [] }, /gpus must be an inventory object/],
    [
      'too many gpus',
      { ...registration, gpus: { source: 'nvidia-smi', gpus: Array.from({ length: 257 }, (_, index) => ({ index })) } },
      /gpus\.gpus must be a list of at most 256 GPUs/,
    ],
    [
      'a version too long',
      { ...registration, version: 'v'.repeat(65) },
      /version must be a string of at most 64 characters on one line/,
    ],
    ['a version that is not a string', { ...registration, version: 3 }, /version must be a string/],
    ['ready that is not a boolean', { ...registration, ready: 'yes' }, /ready must be true or false, got "yes"/],
    [
      'a negative slotsInUse',
      { ...registration, load: { ...load, slotsInUse: -1 } },
      /load\.slotsInUse must be a whole number from 0 to 65536, got -1/,
    ],
    [
      'a KV-cache use over 1',
      { ...registration, load: { ...load, kvCacheUsage: 1.5 } },
      /load\.kvCacheUsage must be a fraction from 0 to 1, got 1\.5/,
    ],
    [
      'a negative queue',
      { ...registration, load: { ...load, queue: -2 } },
      /load\.queue must be a number of 0 or more/,
    ],
    [
      'per-model load without counts',
      { ...registration, load: { ...load, models: { m1: { running: 'x' } } } },
      /load\.models\["m1"\] must carry running and waiting counts/,
    ],
  ])('says why a body with %s is invalid', (_name, body, message) => {
    const parsed = parseRegistration(body);
    expect(parsed.kind).toBe('invalid');
    expect((parsed as { message: string }).message).toMatch(message);
  });
});

describe('the capacity a runner advertises', () => {
  const capacity = { labels: { zone: 'a', 'example.com/gpu': 'h100' }, freeGpus: [2, 3], engineKinds: ['vllm', 'sim'] };

  it('is taken in a registration and a heartbeat, at every limit, and left out when a runner sends none', () => {
    expect(parseRegistration({ ...registration, capacity })).toEqual({
      kind: 'ok',
      value: { ...registration, capacity },
    });
    const atLimits = {
      labels: Object.fromEntries(
        Array.from({ length: 64 }, (_, i) => [`${'p'.repeat(240)}.io/${`k${i}`.padEnd(63, 'x')}`, 'v'.repeat(63)]),
      ),
      freeGpus: Array.from({ length: 256 }, (_, i) => 4095 - i),
      engineKinds: Array.from({ length: 16 }, (_, i) => `kind-${i}`.padEnd(32, 'x')),
    };
    expect(parseRegistration({ ...registration, capacity: { ...atLimits, extra: 1 } })).toEqual({
      kind: 'ok',
      value: { ...registration, capacity: atLimits },
    });
    expect(parseHeartbeat({ models: [], load, capacity })).toEqual({
      kind: 'ok',
      value: { ready: true, state: 'serving', models: [], load, capacity },
    });
    expect(parseHeartbeat({ models: [], load })).toEqual({
      kind: 'ok',
      value: { ready: true, state: 'serving', models: [], load },
    });
  });

  it.each<[string, unknown, RegExp]>([
    ['not an object', [], /^registration capacity must be an object, got \[\]$/],
    ['no labels', { ...capacity, labels: undefined }, /capacity\.labels must be an object of label keys and values/],
    [
      'a bad label key',
      { ...capacity, labels: { 'a b': 'x' } },
      /capacity\.labels: label key "a b" must be .*Kubernetes label syntax/,
    ],
    [
      'a bad label value',
      { ...capacity, labels: { zone: 'x\ny' } },
      /capacity\.labels: label zone value "x\\ny" must be/,
    ],
    [
      '65 labels',
      { ...capacity, labels: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, 'v'])) },
      /capacity\.labels must hold at most 64 labels, got 65/,
    ],
    [
      'freeGpus not a list',
      { ...capacity, freeGpus: 2 },
      /capacity\.freeGpus must be a list of at most 256 GPU indices, got 2/,
    ],
    [
      '257 free GPUs',
      { ...capacity, freeGpus: Array.from({ length: 257 }, (_, i) => i) },
      /capacity\.freeGpus must be a list of at most 256 GPU indices/,
    ],
    [
      'a negative GPU index',
      { ...capacity, freeGpus: [-1] },
      /capacity\.freeGpus\[0\] must be a whole number from 0 to 4095, got -1/,
    ],
    [
      'a GPU index past the limit',
      { ...capacity, freeGpus: [0, 4096] },
      /capacity\.freeGpus\[1\] must be a whole number from 0 to 4095, got 4096/,
    ],
    ['a GPU listed twice', { ...capacity, freeGpus: [1, 1] }, /capacity\.freeGpus lists GPU 1 twice/],
    [
      'engineKinds not a list',
      { ...capacity, engineKinds: 'vllm' },
      /capacity\.engineKinds must be a list of at most 16 engine kinds/,
    ],
    [
      '17 engine kinds',
      { ...capacity, engineKinds: Array.from({ length: 17 }, (_, i) => `k${i}`) },
      /capacity\.engineKinds must be a list of at most 16 engine kinds/,
    ],
    [
      'an engine kind with a space',
      { ...capacity, engineKinds: ['v llm'] },
      /capacity\.engineKinds\[0\] must be 1-32 lowercase letters, digits or -, got "v llm"/,
    ],
  ])('refuses a registration whose capacity has %s, naming the field', (_name, bad, message) => {
    const parsed = parseRegistration({ ...registration, capacity: bad });
    expect(parsed).toMatchObject({ kind: 'invalid', message: expect.stringMatching(message) });
  });

  it("refuses a heartbeat with a bad capacity, naming it as the heartbeat's", () => {
    expect(parseHeartbeat({ models: [], load, capacity: { ...capacity, freeGpus: [1.5] } })).toMatchObject({
      kind: 'invalid',
      message: 'heartbeat capacity.freeGpus[0] must be a whole number from 0 to 4095, got 1.5',
    });
  });
});

describe('the hosted engine a runner reports', () => {
  const hosted = { replica: 'rep-1', model: 'm1', state: 'ready', since: 1_700_000_000_000 };
  const failed = {
    replica: 'rep-2',
    model: 'm1',
    state: 'failed',
    since: 5,
    reason: 'the engine exited with code 1',
    output: ['loading', 'boom'],
  };

  it('is taken in a registration and a heartbeat, at every limit, with capacity.orders, and left out when absent', () => {
    const capacity = { labels: {}, freeGpus: [], engineKinds: ['sim'], orders: true };
    expect(parseRegistration({ ...registration, capacity, hosted })).toEqual({
      kind: 'ok',
      value: { ...registration, capacity, hosted },
    });
    expect(parseHeartbeat({ models: [], load, capacity, hosted: failed })).toEqual({
      kind: 'ok',
      value: { ready: true, state: 'serving', models: [], load, capacity, hosted: failed },
    });
    for (const state of ['starting', 'ready', 'draining', 'stopped', 'failed']) {
      expect(parseHeartbeat({ models: [], load, hosted: { ...hosted, state } }).kind).toBe('ok');
    }
    const atLimits = {
      replica: 'r'.repeat(128),
      model: 'm'.repeat(256),
      state: 'failed',
      since: Number.MAX_SAFE_INTEGER,
      reason: 'x'.repeat(512),
      output: Array.from({ length: 20 }, () => 'o'.repeat(512)),
    };
    expect(parseHeartbeat({ models: [], load, hosted: { ...atLimits, extra: 1 } })).toEqual({
      kind: 'ok',
      value: { ready: true, state: 'serving', models: [], load, hosted: atLimits },
    });
    expect(parseHeartbeat({ models: [], load, capacity: { ...capacity, orders: false } })).toMatchObject({
      kind: 'ok',
      value: { capacity: { orders: false } },
    });
    expect((parseHeartbeat({ models: [], load }) as { value: object }).value).not.toHaveProperty('hosted');
  });

  it('carries the revision of the order it hosts, and refuses one outside the wire id rule', () => {
    const withRevision = { ...hosted, revision: '9e964c3c25845b4e' };
    expect(parseHeartbeat({ models: [], load, hosted: withRevision })).toMatchObject({
      kind: 'ok',
      value: { hosted: withRevision },
    });
    expect(parseHeartbeat({ models: [], load, hosted: { ...hosted, revision: 'a b' } })).toMatchObject({
      kind: 'invalid',
      message: expect.stringMatching(/hosted\.revision must be 1-128 letters, digits or \._:- characters, got "a b"/),
    });
    expect(parseHeartbeat({ models: [], load, hosted: { ...hosted, revision: 7 } })).toMatchObject({
      kind: 'invalid',
      message: expect.stringMatching(/hosted\.revision must be/),
    });
  });

  it.each<[string, unknown, RegExp]>([
    ['not an object', 'ready', /^heartbeat hosted must be an object, got "ready"$/],
    [
      'a bad replica id',
      { ...hosted, replica: 'a b' },
      /hosted\.replica must be 1-128 letters, digits or \._:- characters, got "a b"/,
    ],
    [
      'no model',
      { ...hosted, model: undefined },
      /hosted\.model must be a model name of 1 to 256 characters on one line/,
    ],
    ['a model over two lines', { ...hosted, model: 'm\nx' }, /hosted\.model must be a model name/],
    [
      'an unknown state',
      { ...hosted, state: 'crashed' },
      /hosted\.state must be one of starting, ready, draining, stopped, failed, got "crashed"/,
    ],
    ['a negative since', { ...hosted, since: -1 }, /hosted\.since must be a whole number from 0/],
    [
      'a reason over two lines',
      { ...failed, reason: 'exit\n{"level":"error"}' },
      /hosted\.reason must be a string of at most 512 characters on one line/,
    ],
    [
      'a reason too long',
      { ...failed, reason: 'x'.repeat(513) },
      /hosted\.reason must be a string of at most 512 characters/,
    ],
    [
      '21 output lines',
      { ...failed, output: Array.from({ length: 21 }, () => 'o') },
      /hosted\.output must be a list of at most 20 lines/,
    ],
    [
      'an output line too long',
      { ...failed, output: ['o'.repeat(513)] },
      /hosted\.output\[0\] must be a string of at most 512 characters on one line/,
    ],
    [
      'an output line with a control character',
      { ...failed, output: ['ok', '\u001b[31mred'] },
      /hosted\.output\[1\] must be a string of at most 512 characters on one line/,
    ],
  ])('refuses a heartbeat whose hosted engine has %s, naming the field', (_name, bad, message) => {
    expect(parseHeartbeat({ models: [], load, hosted: bad })).toMatchObject({
      kind: 'invalid',
      message: expect.stringMatching(message),
    });
  });

  it("refuses a registration with a bad hosted engine or capacity.orders, naming them as the registration's", () => {
    expect(parseRegistration({ ...registration, hosted: { ...hosted, state: 'odd' } })).toMatchObject({
      kind: 'invalid',
      message: expect.stringMatching(/^registration hosted\.state must be one of/),
    });
    expect(
      parseRegistration({ ...registration, capacity: { labels: {}, freeGpus: [], engineKinds: [], orders: 'yes' } }),
    ).toMatchObject({
      kind: 'invalid',
      message: 'registration capacity.orders must be true or false, got "yes"',
    });
  });
});

describe('parseEngineOrder', () => {
  const profile = {
    kind: 'vllm',
    model: 'meta-llama/Llama-3.1-8B-Instruct',
    gpus: 2,
    args: ['--max-model-len', '8192'],
    env: { HF_TOKEN: 'secret-value' },
  };
  const order = { replica: 'llama-7f3a', model: 'llama', profile };

  it('takes null, and an order as a fresh object of its known fields', () => {
    expect(parseEngineOrder(null)).toEqual({ kind: 'ok', value: null });
    expect(parseEngineOrder({ ...order, extra: 1 })).toEqual({ kind: 'ok', value: order });
    expect(parseEngineOrder({ ...order, revision: '9e964c3c25845b4e' })).toEqual({
      kind: 'ok',
      value: { ...order, revision: '9e964c3c25845b4e' },
    });
    expect(parseEngineOrder({ ...order, revision: 'a/b' })).toMatchObject({
      kind: 'invalid',
      message: expect.stringMatching(/^host\.revision must be 1-128 letters/),
    });
    const full = {
      ...order,
      profile: { ...profile, gpus: [0, 3], port: 8000, binary: '/opt/vllm/bin/vllm', startTimeout: 900_000 },
    };
    expect(parseEngineOrder(full)).toEqual({ kind: 'ok', value: full });
    // Absent args and env read empty.
    const { args: _a, env: _e, ...bare } = profile;
    expect(parseEngineOrder({ ...order, profile: bare })).toEqual({
      kind: 'ok',
      value: { ...order, profile: { ...bare, args: [], env: {} } },
    });
    const atLimits = {
      ...order,
      profile: {
        ...profile,
        gpus: ORDER_LIMITS.gpus,
        args: Array.from({ length: ORDER_LIMITS.args }, () => 'a'.repeat(ORDER_LIMITS.text)),
        startTimeout: ORDER_LIMITS.startTimeout,
      },
    };
    expect(parseEngineOrder(atLimits).kind).toBe('ok');
  });

  it.each<[string, unknown, RegExp]>([
    ['not an object', 'start', /^host must be an engine order or null, got "start"$/],
    ['a bad replica id', { ...order, replica: '' }, /host\.replica must be 1-128 letters/],
    ['no model', { ...order, model: 7 }, /host\.model must be a model name/],
    ['no profile', { ...order, profile: undefined }, /host\.profile must be an object/],
    [
      'an unknown profile field',
      { ...order, profile: { ...profile, gpu: 1 } },
      /host\.profile has an unknown field "gpu"/,
    ],
    [
      'a bad kind',
      { ...order, profile: { ...profile, kind: 'V LLM' } },
      /host\.profile\.kind must be 1-32 lowercase letters/,
    ],
    [
      'an empty profile model',
      { ...order, profile: { ...profile, model: '' } },
      /host\.profile\.model must be a model name/,
    ],
    [
      'a negative GPU count',
      { ...order, profile: { ...profile, gpus: -1 } },
      /host\.profile\.gpus must be a list of GPU indices or a count from 0 to 256, got -1/,
    ],
    [
      'a GPU count past the limit',
      { ...order, profile: { ...profile, gpus: 257 } },
      /host\.profile\.gpus must be a list of GPU indices or a count from 0 to 256, got 257/,
    ],
    [
      'a GPU listed twice',
      { ...order, profile: { ...profile, gpus: [1, 1] } },
      /host\.profile\.gpus lists GPU 1 twice/,
    ],
    [
      'a GPU index past the limit',
      { ...order, profile: { ...profile, gpus: [4096] } },
      /host\.profile\.gpus\[0\] must be a whole number from 0 to 4095/,
    ],
    [
      'a port out of range',
      { ...order, profile: { ...profile, port: 70_000 } },
      /host\.profile\.port must be a whole number from 1 to 65535, got 70000/,
    ],
    [
      'a binary with a NUL byte',
      { ...order, profile: { ...profile, binary: 'vl\u0000lm' } },
      /host\.profile\.binary must be a string of at most 16384 characters without NUL bytes/,
    ],
    [
      'a zero start timeout',
      { ...order, profile: { ...profile, startTimeout: 0 } },
      /host\.profile\.startTimeout must be a whole number from 1 to 86400000, got 0/,
    ],
    [
      'args not a list',
      { ...order, profile: { ...profile, args: '--x' } },
      /host\.profile\.args must be a list of at most 1024 strings/,
    ],
    [
      'too many args',
      { ...order, profile: { ...profile, args: Array.from({ length: 1025 }, () => 'a') } },
      /host\.profile\.args must be a list of at most 1024 strings/,
    ],
    [
      'an arg too long',
      { ...order, profile: { ...profile, args: ['a'.repeat(16_385)] } },
      /host\.profile\.args\[0\] must be a string of at most 16384 characters/,
    ],
    [
      'env not an object',
      { ...order, profile: { ...profile, env: ['A=1'] } },
      /host\.profile\.env must be an object of string values/,
    ],
    [
      'a bad variable name',
      { ...order, profile: { ...profile, env: { 'A=B': 'x' } } },
      /host\.profile\.env has an invalid variable name "A=B"/,
    ],
    [
      'a value that is not a string',
      { ...order, profile: { ...profile, env: { HF_TOKEN: 7 } } },
      /host\.profile\.env\.HF_TOKEN must be a string/,
    ],
  ])('says why an order with %s is invalid', (_name, bad, message) => {
    expect(parseEngineOrder(bad)).toMatchObject({ kind: 'invalid', message: expect.stringMatching(message) });
  });

  it('never quotes an env value or an argument in its message: they may hold secrets', () => {
    const parsed = parseEngineOrder({ ...order, profile: { ...profile, env: { HF_TOKEN: 'secret-value\u0000' } } });
    expect(parsed.kind).toBe('invalid');
    expect((parsed as { message: string }).message).not.toContain('secret-value');
  });
});

describe('parseHeartbeat', () => {
  it('takes a well-formed body; any state but draining reads serving, and ready defaults to true', () => {
    expect(parseHeartbeat({ ready: false, state: 'draining', models: ['m1'], load })).toEqual({
      kind: 'ok',
      value: { ready: false, state: 'draining', models: ['m1'], load },
    });
    expect(parseHeartbeat({ state: 'odd', models: [], load })).toEqual({
      kind: 'ok',
      value: { ready: true, state: 'serving', models: [], load },
    });
  });

  it.each<[string, unknown, RegExp]>([
    ['not an object', 7, /heartbeat body must be a JSON object/],
    ['models not a list', { models: {}, load }, /heartbeat models must be a list/],
    ['a load that is not numeric', { models: [], load: { slotsInUse: '1', slots: 4 } }, /load must carry numeric/],
    [
      'too many models',
      { models: Array.from({ length: 257 }, (_, i) => `m${i}`), load },
      /heartbeat models must list at most 256 models/,
    ],
    ['an empty model name', { models: [''], load }, /heartbeat models\[0\] must be a model name/],
    ['ready that is not a boolean', { ready: 1, models: [], load }, /heartbeat ready must be true or false/],
    [
      'slots out of range',
      { models: [], load: { ...load, slots: 1e9 } },
      /load\.slots must be a whole number from 0 to 65536/,
    ],
  ])('says why a body with %s is invalid', (_name, body, message) => {
    const parsed = parseHeartbeat(body);
    expect(parsed).toMatchObject({ kind: 'invalid', message: expect.stringMatching(message) });
  });
});

describe('gatewayAnswerKind', () => {
  it.each([
    [200, 'accepted'],
    [204, 'accepted'],
    [299, 'accepted'],
    [404, 'unknown-runner'],
    [401, 'token-refused'],
    [403, 'id-refused'],
    [0, 'failed'],
    [400, 'failed'],
    [413, 'failed'],
    [500, 'failed'],
    [503, 'failed'],
    [302, 'failed'],
  ] as const)('reads status %i as %s', (status, kind) => {
    expect(gatewayAnswerKind(status)).toBe(kind);
  });
});

describe('the cache announcement a runner sends', () => {
  const cache = {
    tokenizer: 'sluice-sim',
    scheme: { algorithm: 'sha256_cbor', seed: '0', blockSize: 16 },
    events: true,
  };
  const beat = { ready: true, models: ['m'], load };

  it('is carried by registrations and heartbeats as a fresh object of its fields', () => {
    const parsed = parseRegistration({ ...registration, cache: { ...cache, extra: 1 } });
    expect(parsed).toMatchObject({ kind: 'ok', value: { cache } });
    expect(parsed.kind === 'ok' && parsed.value.cache).toEqual(cache);
    expect(parseHeartbeat({ ...beat, cache })).toMatchObject({ kind: 'ok', value: { cache } });
  });

  it('is optional', () => {
    const parsed = parseHeartbeat(beat);
    expect(parsed.kind === 'ok' && 'cache' in parsed.value).toBe(false);
  });

  it('is dropped, not refused, when it names a hash algorithm this side does not know', () => {
    const parsed = parseRegistration({
      ...registration,
      cache: { ...cache, scheme: { ...cache.scheme, algorithm: 'xxhash' } },
    });
    expect(parsed.kind).toBe('ok');
    expect(parsed.kind === 'ok' && parsed.value.cache).toBeUndefined();
  });

  it.each([
    ['not an object', 'x', /registration cache must be an object/],
    ['an empty tokenizer', { ...cache, tokenizer: '' }, /cache\.tokenizer must be a name/],
    ['events not a boolean', { ...cache, events: 'yes' }, /cache\.events must be true or false/],
    ['no scheme', { ...cache, scheme: null }, /cache\.scheme must be an object/],
    ['a numeric seed', { ...cache, scheme: { ...cache.scheme, seed: 0 } }, /cache\.scheme\.seed must be a string/],
    [
      'a block size of 0',
      { ...cache, scheme: { ...cache.scheme, blockSize: 0 } },
      /cache\.scheme\.blockSize must be a whole number/,
    ],
  ])('refuses %s, naming the field', (_name, value, message) => {
    expect(parseRegistration({ ...registration, cache: value })).toEqual({
      kind: 'invalid',
      message: expect.stringMatching(message),
    });
  });
});
