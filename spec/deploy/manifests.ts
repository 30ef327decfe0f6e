/**
 * The Kubernetes files of docs/deploy/kubernetes as `kubectl apply -k` would see them: the objects
 * of every resource a kustomization lists (following folders that hold one), and the Secrets its
 * secretGenerator makes, with their keys (the files under secrets/ are the operator's, never in the
 * repository, so a Secret here has its keys and no values). YAML is read as Kubernetes reads it,
 * YAML 1.1 (`0440` is octal).
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { basename, join, normalize, relative } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { root as ROOT } from '../layers/sources.ts';

/** A Kubernetes object as written: apiVersion, kind, metadata, and the rest. */
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [field: string]: any;
}

/** An object and the file it came from, a path from the repository root. */
export interface Manifest {
  readonly file: string;
  readonly object: K8sObject;
}

interface Kustomization {
  namespace?: string;
  resources?: string[];
  secretGenerator?: { name: string; type?: string; files?: string[] }[];
}

/** Every YAML document of `file` (a path from the root), parsed as YAML 1.1; a syntax error throws. */
export function readYaml(file: string): any[] {
  const docs = parseAllDocuments(readFileSync(join(ROOT, file), 'utf8'), { version: '1.1' });
  return docs.map((doc) => {
    if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors[0]!.message}`);
    return doc.toJS();
  });
}

/** The key a secretGenerator `files` entry makes: `key=path`, else the file's name. */
export function generatedKey(entry: string): string {
  const eq = entry.indexOf('=');
  return eq === -1 ? basename(entry) : entry.slice(0, eq);
}

/**
 * The objects the kustomization in `dir` (a path from the root) builds: its resources, each file's
 * documents, a folder's through its own kustomization, and its generated Secrets, each in the
 * kustomization's namespace.
 */
export function kustomize(dir: string): Manifest[] {
  const [k] = readYaml(join(dir, 'kustomization.yaml')) as [Kustomization];
  const out: Manifest[] = [];
  for (const resource of k.resources ?? []) {
    const path = normalize(join(dir, resource));
    if (statSync(join(ROOT, path)).isDirectory()) out.push(...kustomize(path));
    else for (const object of readYaml(path)) out.push({ file: path, object });
  }
  for (const generator of k.secretGenerator ?? []) {
    const object: K8sObject = {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: generator.name },
      ...(generator.type === undefined ? {} : { type: generator.type }),
      data: Object.fromEntries((generator.files ?? []).map((entry) => [generatedKey(entry), ''])),
    };
    out.push({ file: join(dir, 'kustomization.yaml'), object });
  }
  const seen = new Set<string>();
  return out
    .map(({ file, object }) => ({
      file,
      object: { ...object, metadata: { ...object.metadata, ...(k.namespace ? { namespace: k.namespace } : {}) } },
    }))
    .filter(({ object }) => {
      // A folder listed by two kustomizations (an overlay and its base) yields its objects once.
      const id = `${object.kind}/${object.metadata.name}`;
      if (seen.has(id)) return false;
      seen.add(id);
      return true;
    });
}

/** Every file below `dir` (a path from the root) whose name ends in `.yaml`, as paths from the root. */
export function yamlFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter((name) => name.endsWith('.yaml'))
    .map((name) => relative(ROOT, join(ROOT, dir, name)));
}

/** A workload's pod: where it came from, its labels and its spec. */
export interface Pod {
  readonly owner: string;
  readonly labels: Record<string, string>;
  readonly spec: any;
}

/** The pod templates of the workloads among `manifests`. */
export function podsOf(manifests: readonly Manifest[]): Pod[] {
  return manifests
    .filter(({ object }) => ['Deployment', 'StatefulSet', 'DaemonSet'].includes(object.kind))
    .map(({ object }) => ({
      owner: `${object.kind}/${object.metadata.name}`,
      labels: object.spec.template.metadata?.labels ?? {},
      spec: object.spec.template.spec,
    }));
}

/** Every container of a pod, its init containers (native sidecars among them) first. */
export function containersOf(pod: Pod): any[] {
  return [...(pod.spec.initContainers ?? []), ...pod.spec.containers];
}

/** True when every label of `selector` is on `labels`. */
export function selects(selector: Record<string, string> | undefined, labels: Record<string, string>): boolean {
  const entries = Object.entries(selector ?? {});
  return entries.length > 0 && entries.every(([key, value]) => labels[key] === value);
}
