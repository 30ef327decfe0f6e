/**
 * Certificates made for a spec with openssl, in a temporary directory: a CA, and leaf
 * certificates it signs for 127.0.0.1 and localhost, good for a server and for a client.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** One certificate and its key, as PEM text and as the files they were written to. */
export interface Issued {
  cert: string;
  key: string;
  certFile: string;
  keyFile: string;
}

/** A CA that issues certificates, in its own temporary directory. */
export interface TestCa {
  /** The CA's certificate, PEM, and its file. */
  cert: string;
  certFile: string;
  /** A certificate for `name`, with 127.0.0.1 and localhost as subject alternative names. */
  issue(name: string): Issued;
  /** Removes the directory. */
  remove(): void;
}

function openssl(args: readonly string[], cwd: string): void {
  execFileSync('openssl', args, { cwd, stdio: 'pipe' });
}

/** Makes a CA named `name` (P-256 keys, valid one day). */
export function makeCa(name: string): TestCa {
  const dir = mkdtempSync(join(tmpdir(), `sluice-certs-${name}-`));
  const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(['req', '-x509', ...key, '-keyout', 'ca.key', '-out', 'ca.crt', '-subj', `/CN=${name}`, '-days', '1'], dir);
  writeFileSync(
    join(dir, 'leaf.ext'),
    'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n',
  );
  const certFile = join(dir, 'ca.crt');
  return {
    cert: readFileSync(certFile, 'utf8'),
    certFile,
    issue(leaf: string): Issued {
      openssl(['req', ...key, '-keyout', `${leaf}.key`, '-out', `${leaf}.csr`, '-subj', `/CN=${leaf}`], dir);
      openssl(
        [
          'x509',
          '-req',
          '-in',
          `${leaf}.csr`,
          '-CA',
          'ca.crt',
          '-CAkey',
          'ca.key',
          '-CAcreateserial',
          '-out',
          `${leaf}.crt`,
          '-days',
          '1',
          '-extfile',
          'leaf.ext',
        ],
        dir,
      );
      const issuedCert = join(dir, `${leaf}.crt`);
      const issuedKey = join(dir, `${leaf}.key`);
      return {
        cert: readFileSync(issuedCert, 'utf8'),
        key: readFileSync(issuedKey, 'utf8'),
        certFile: issuedCert,
        keyFile: issuedKey,
      };
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
