#!/usr/bin/env node
// A smoke run of the built sluice on another Node: `node .ci/smoke.mjs <path to node>`. It loads
// zeromq's prebuilt addon there, starts `sluice up` on a free port (the gateway, two runners and
// two simulated engines, each on that Node, since every child is started with the parent's
// executable), makes one chat call, and stops it with SIGINT. Every step is bounded in time; it
// exits 1 with what went wrong, 0 when the call was answered and everything stopped cleanly.
import { execFileSync, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const node = process.argv[2];
if (!node) {
  process.stderr.write('usage: node .ci/smoke.mjs <path to node>\n');
  process.exit(2);
}
const root = fileURLToPath(new URL('../', import.meta.url));
const START_MS = 60_000;
const CALL_MS = 30_000;
const STOP_MS = 30_000;

/** Resolves with `promise`, or rejects naming `what` once `ms` passed. */
function within(ms, what, promise) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took over ${ms / 1000} s`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

const version = execFileSync(node, ['--version'], { encoding: 'utf8' }).trim();
// zeromq carries KV-cache events from the engines; its addon is N-API, built once for every Node.
const zmq = 'const z = await import("zeromq"); const s = new z.Publisher(); s.close(); console.log(z.version);';
const zmqVersion = execFileSync(node, ['--input-type=module', '-e', zmq], { cwd: root, encoding: 'utf8' }).trim();

const up = spawn(node, ['gateway/cli/sluice.mjs', 'up', '--port', '0', '--log-level', 'warn'], {
  cwd: root,
  stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
});
let stderr = '';
up.stderr.on('data', (chunk) => (stderr += chunk.toString('utf8')));
const exited = new Promise((resolve) => up.once('exit', (code, signal) => resolve(code ?? signal)));
try {
  const url = await within(
    START_MS,
    'sluice up',
    new Promise((resolve, reject) => {
      up.on('message', (m) => m?.type === 'listening' && typeof m.url === 'string' && resolve(m.url));
      up.once('exit', (code) => reject(new Error(`sluice up exited (${code}) before listening`)));
    }),
  );
  if (stderr.includes('older than the sources')) throw new Error('dist/ is older than the sources: not the build');
  const answer = await within(
    CALL_MS,
    'the chat call',
    fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-small', messages: [{ role: 'user', content: 'hi' }] }),
    }).then(async (res) => ({ status: res.status, body: await res.json() })),
  );
  if (answer.status !== 200 || answer.body.object !== 'chat.completion') {
    throw new Error(`the chat call answered ${answer.status} ${JSON.stringify(answer.body)}`);
  }
  up.kill('SIGINT');
  const code = await within(STOP_MS, 'stopping sluice up', exited);
  if (code !== 0) throw new Error(`sluice up exited with ${code} after SIGINT`);
  process.stdout.write(`smoke on node ${version} (zeromq ${zmqVersion}): sluice up answered a chat call and stopped\n`);
} catch (error) {
  up.kill('SIGKILL');
  process.stderr.write(`smoke on node ${version} failed: ${error.message}\n${stderr.slice(-4000)}\n`);
  process.exit(1);
}
