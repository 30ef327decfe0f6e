// The container image's HEALTHCHECK: GET /healthz on the port the process listens on inside the
// container (SLUICE_PORT, else PORT, else 8080), over https when the front has a certificate
// (SLUICE_TLS_CERT; the check is local, so the certificate is not verified). The simulated engine
// answers /health, as engines do, and 404 to /healthz: then /health is asked. Exit 0 when the
// answer is 200, 1 otherwise, within 2 s each. A runner under mutual TLS takes no request without
// a client certificate: run it with --no-healthcheck and let the orchestrator probe it.
import { get as httpGet } from 'node:http';
import { get as httpsGet } from 'node:https';

const port = process.env.SLUICE_PORT || process.env.PORT || '8080';
const tls = Boolean(process.env.SLUICE_TLS_CERT);
const get = tls ? httpsGet : httpGet;

/** The status `path` answers with, or 0 when it does not answer. */
function statusOf(path) {
  return new Promise((resolve) => {
    const options = { host: '127.0.0.1', port, path, timeout: 2000, ...(tls ? { rejectUnauthorized: false } : {}) };
    const request = get(options, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    request.on('timeout', () => request.destroy(new Error('timed out')));
    request.on('error', () => resolve(0));
  });
}

let status = await statusOf('/healthz');
if (status === 404) status = await statusOf('/health');
process.exit(status === 200 ? 0 : 1);
