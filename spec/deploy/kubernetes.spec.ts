/**
 * docs/deploy/kubernetes: every object is valid against the Kubernetes API schemas
 * (kubernetes-models), and the objects agree with each other and with sluice: Services and the
 * PodDisruptionBudget select pods that exist, on ports those pods name; every Secret and key
 * referenced is generated; secret files are mounted where the settings name them, readable by the
 * pod's group only; the probes ask routes the gateway and the runner serve; every SLUICE_*
 * variable is a setting of the command its container runs, with a value that setting accepts; and
 * runners register with every gateway the StatefulSet runs. kubernetes-models accepts fields it
 * does not know, so a misspelt optional field passes the schema check.
 */
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Namespace, Secret, Service } from 'kubernetes-models/v1';
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { Ingress, NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { gateway } from '../../gateway/cli/gateway-command.ts';
import { runner } from '../../gateway/cli/runner-command.ts';
import type { Command } from '../../gateway/cli/command.ts';
import { createGateway } from '../../gateway/server.ts';
import { createRunner } from '../../runner/server.ts';
import { envOf, resolveSettings } from '../../gateway/cli/settings.ts';
import { containersOf, kustomize, podsOf, selects, yamlFiles } from './manifests.ts';
import type { K8sObject } from './manifests.ts';

const DIR = 'docs/deploy/kubernetes';
/** The base, and the overlay that adds a ServiceMonitor: everything the folder defines. */
const manifests = kustomize(`${DIR}/prometheus-operator`);
const objects = manifests.map(({ object }) => object);
const pods = podsOf(manifests);

/** The schema of each kind the files use; the Prometheus Operator's CRDs have none here. */
const MODELS: Record<string, new (data: any) => { validate(): void }> = {
  'v1/Namespace': Namespace,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'apps/v1/Deployment': Deployment,
  'apps/v1/StatefulSet': StatefulSet,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'networking.k8s.io/v1/Ingress': Ingress,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
};
const WITHOUT_SCHEMA = ['monitoring.coreos.com/v1/ServiceMonitor'];
const typeOf = (o: K8sObject) => `${o.apiVersion}/${o.kind}`;
const named = (kind: string) => objects.filter((o) => o.kind === kind);

/** The sluice command a container runs: its first argument, when its image is sluice's. */
const COMMANDS: Record<string, Command> = { gateway, runner };
function sluiceCommand(container: any): string | undefined {
  return /\/sluice:/.test(container.image) ? container.args?.[0] : undefined;
}
const sluiceContainers = pods.flatMap((pod) =>
  containersOf(pod)
    .filter((c) => sluiceCommand(c) !== undefined)
    .map((container) => ({ pod, container, command: sluiceCommand(container)! })),
);

/** A container's environment as the kubelet hands it over: `$(NAME)` expanded, references as stand-ins. */
function containerEnv(container: any): Record<string, string> {
  const env: Record<string, string> = {};
  for (const { name, value, valueFrom } of container.env ?? []) {
    if (value !== undefined) env[name] = String(value).replace(/\$\((\w+)\)/g, (_, ref: string) => env[ref] ?? '');
    else if (valueFrom?.fieldRef?.fieldPath === 'status.podIP') env[name] = '10.1.2.3';
    else if (valueFrom?.fieldRef) env[name] = 'pod-name-0';
    else if (valueFrom?.secretKeyRef) env[name] = 'redis://:secret@sluice-redis:6379/0';
  }
  return env;
}

/** The Secret `name` and its keys, or undefined. */
function secretKeys(name: string): string[] | undefined {
  const secret = named('Secret').find((s) => s.metadata.name === name);
  return secret && Object.keys(secret.data ?? {});
}

describe('the Kubernetes files', () => {
  it('lists every YAML file of the folder in a kustomization', () => {
    const listed = new Set(manifests.map(({ file }) => file));
    const kustomizations = yamlFiles(DIR).filter((file) => file.endsWith('kustomization.yaml'));
    expect(yamlFiles(DIR).filter((file) => !listed.has(file) && !kustomizations.includes(file))).toEqual([]);
    expect(objects.length).toBeGreaterThan(10);
  });

  it.each(manifests.map(({ file, object }) => [`${object.kind} ${object.metadata.name}`, file, object] as const))(
    '%s (%s) is valid against its API schema',
    (_, __, object) => {
      const type = typeOf(object);
      if (WITHOUT_SCHEMA.includes(type)) return;
      const Model = MODELS[type];
      expect(Model, `no schema for ${type}`).toBeDefined();
      expect(() => new Model!(object).validate()).not.toThrow();
    },
  );

  it('the schema check refuses an invalid object', () => {
    const gatewaySet = structuredClone(
      objects.find((o) => o.kind === 'StatefulSet' && /gateway/.test(o.metadata.name)),
    );
    gatewaySet!.spec.template.spec.containers[0].ports[0].containerPort = 'http';
    expect(() => new StatefulSet(gatewaySet).validate()).toThrow(/containerPort/);
  });

  it('has a gateway workload, its Service and PodDisruptionBudget, runners with GPUs, Redis and Secrets', () => {
    const kinds = objects.map((o) => `${o.kind}/${o.metadata.name}`);
    expect(kinds).toEqual(
      expect.arrayContaining([
        'StatefulSet/sluice-gateway',
        'Service/sluice-gateway',
        'PodDisruptionBudget/sluice-gateway',
        'StatefulSet/sluice-redis',
        'Secret/sluice-gateway',
        'Secret/sluice-runner',
        'ServiceMonitor/sluice-gateway',
      ]),
    );
    const gpus = pods.flatMap(containersOf).filter((c) => c.resources?.limits?.['nvidia.com/gpu'] !== undefined);
    expect(gpus.length).toBeGreaterThan(0);
  });

  it('gives every Service and PodDisruptionBudget pods to select, on ports they name', () => {
    for (const service of named('Service')) {
      const matched = pods.filter((pod) => selects(service.spec.selector, pod.labels));
      expect(
        matched.map((p) => p.owner),
        `Service ${service.metadata.name} selects no pod`,
      ).not.toEqual([]);
      for (const port of service.spec.ports) {
        const names = matched.flatMap((pod) => containersOf(pod).flatMap((c) => c.ports ?? []));
        const found = names.some((p: any) => p.name === port.targetPort || p.containerPort === port.targetPort);
        expect(found, `Service ${service.metadata.name} targets ${port.targetPort}`).toBe(true);
      }
    }
    for (const budget of named('PodDisruptionBudget')) {
      expect(pods.some((pod) => selects(budget.spec.selector.matchLabels, pod.labels))).toBe(true);
    }
    for (const monitor of named('ServiceMonitor')) {
      const services = named('Service').filter((s) =>
        selects(monitor.spec.selector.matchLabels, s.metadata.labels ?? {}),
      );
      expect(
        services.map((s) => s.metadata.name),
        'a ServiceMonitor scrapes each pod once',
      ).toEqual(['sluice-gateway']);
      for (const endpoint of monitor.spec.endpoints)
        expect(services[0]!.spec.ports.map((p: any) => p.name)).toContain(endpoint.port);
    }
  });

  it('references only Secrets and keys it generates', () => {
    const refs: { where: string; name: string; key?: string }[] = [];
    for (const pod of pods) {
      for (const c of containersOf(pod))
        for (const e of c.env ?? [])
          if (e.valueFrom?.secretKeyRef)
            refs.push({ where: `${pod.owner} ${c.name} ${e.name}`, ...e.valueFrom.secretKeyRef });
      for (const v of pod.spec.volumes ?? [])
        if (v.secret) refs.push({ where: `${pod.owner} volume ${v.name}`, name: v.secret.secretName });
    }
    for (const ingress of named('Ingress'))
      for (const tls of ingress.spec.tls ?? [])
        refs.push({ where: 'Ingress tls', name: tls.secretName, key: 'tls.crt' });
    for (const monitor of named('ServiceMonitor'))
      for (const e of monitor.spec.endpoints) refs.push({ where: 'ServiceMonitor', ...e.authorization.credentials });
    expect(refs.length).toBeGreaterThan(5);
    for (const ref of refs) {
      const keys = secretKeys(ref.name);
      expect(keys, `${ref.where}: no Secret ${ref.name}`).toBeDefined();
      if (ref.key !== undefined) expect(keys, `${ref.where}: no key ${ref.key} in ${ref.name}`).toContain(ref.key);
    }
  });

  it('sets SLUICE_* variables that are settings of the command the container runs, with values they accept', () => {
    expect(sluiceContainers.map((c) => c.command).sort()).toEqual(['gateway', 'runner']);
    for (const { pod, container, command } of sluiceContainers) {
      const settings = COMMANDS[command]!.settings;
      const known = new Set(['SLUICE_CONFIG', ...settings.map((s) => envOf(s.key))]);
      const env = containerEnv(container);
      const unknown = Object.keys(env).filter((name) => name.startsWith('SLUICE_') && !known.has(name));
      expect(unknown, `${pod.owner} ${container.name}`).toEqual([]);
      expect(() => resolveSettings(settings, [], env)).not.toThrow();
    }
  });

  it('mounts each secret file a setting names, from a Secret that holds it, readable by the pod group only', () => {
    for (const { pod, container } of sluiceContainers) {
      const files = Object.entries(containerEnv(container)).filter(([name]) => /^SLUICE_\w+_FILE$/.test(name));
      expect(files.length, `${pod.owner} reads its secrets from files`).toBeGreaterThan(0);
      for (const [name, path] of files) {
        const mount = container.volumeMounts.find((m: any) => path.startsWith(`${m.mountPath}/`));
        expect(mount, `${name}: nothing mounted at ${path}`).toBeDefined();
        const volume = pod.spec.volumes.find((v: any) => v.name === mount.name);
        expect(secretKeys(volume.secret.secretName)).toContain(path.slice(mount.mountPath.length + 1));
        // A secret file any user may read is refused (gateway/access/secrets.ts).
        expect(volume.secret.defaultMode & 0o004, `${name} is readable by others`).toBe(0);
        const group = container.securityContext?.runAsGroup ?? pod.spec.securityContext?.runAsGroup;
        expect(pod.spec.securityContext.fsGroup, `${pod.owner}: the secret files' group`).toBe(group);
      }
    }
  });

  it('listens behind the ingress with plain http only where TLS terminates upstream', () => {
    const [gatewayContainer] = sluiceContainers.filter((c) => c.command === 'gateway');
    expect(containerEnv(gatewayContainer!.container).SLUICE_TLS_TERMINATED_UPSTREAM).toBe('true');
    const ingress = named('Ingress');
    expect(ingress.length).toBe(1);
    expect(ingress[0]!.spec.tls.length).toBeGreaterThan(0);
    for (const rule of ingress[0]!.spec.rules)
      for (const path of rule.http.paths) {
        const service = named('Service').find((s) => s.metadata.name === path.backend.service.name);
        expect(service?.spec.ports.map((p: any) => p.name)).toContain(path.backend.service.port.name);
      }
  });

  it('registers every runner with every gateway of the StatefulSet, by its stable name', () => {
    const set = objects.find((o) => o.kind === 'StatefulSet' && o.metadata.name === 'sluice-gateway')!;
    const headless = named('Service').find((s) => s.metadata.name === set.spec.serviceName)!;
    expect(headless.spec.clusterIP).toBe('None');
    const port = headless.spec.ports[0].port;
    const expected = Array.from(
      { length: set.spec.replicas },
      (_, i) => `http://${set.metadata.name}-${i}.${headless.metadata.name}:${port}`,
    );
    for (const { pod, container } of sluiceContainers.filter((c) => c.command === 'runner')) {
      const env = containerEnv(container);
      expect(env.SLUICE_GATEWAY?.split(','), pod.owner).toEqual(expected);
      // Gateways take registered runner URLs that name an IP address.
      expect(env.SLUICE_ADVERTISE_URL).toMatch(/^http:\/\/\d+\.\d+\.\d+\.\d+:\d+$/);
    }
  });

  it('runs sluice containers as a non-root user on a read-only root file system', () => {
    for (const { pod, container } of sluiceContainers) {
      const context = { ...pod.spec.securityContext, ...container.securityContext };
      expect(context, `${pod.owner} ${container.name}`).toMatchObject({
        runAsNonRoot: true,
        runAsUser: 10001,
        readOnlyRootFilesystem: true,
        allowPrivilegeEscalation: false,
      });
    }
  });
});

/** The HTTP probes of sluice's containers: `[owner and container, command, probe]`. */
const probes = sluiceContainers.flatMap(({ pod, container, command }) =>
  ['livenessProbe', 'readinessProbe', 'startupProbe']
    .filter((probe) => container[probe]?.httpGet !== undefined)
    .map((probe) => [`${pod.owner} ${container.name} ${probe}`, command, container[probe].httpGet, container] as const),
);

describe('the probes of the Kubernetes files', () => {
  const urls: Record<string, string> = {};
  const stops: (() => Promise<unknown>)[] = [];
  beforeAll(async () => {
    const gw = createGateway({ runnerToken: 'spec-runner-token-0123456789' });
    stops.push(() => gw.close());
    urls.gateway = (await gw.listen(0, '127.0.0.1')).url;
    // An engine nothing listens for: the runner serves its probes, and is not ready.
    const r = createRunner({ engine: 'http://127.0.0.1:9' });
    stops.push(() => r.close({ drainTimeout: 0 }));
    urls.runner = (await r.listen(0, '127.0.0.1')).url;
  });
  afterAll(() => Promise.all(stops.map((stop) => stop())));

  it('has a liveness and a readiness probe on every sluice container', () => {
    for (const { pod, container } of sluiceContainers) {
      expect(container.livenessProbe?.httpGet?.path, `${pod.owner}`).toBe('/healthz');
      expect(container.readinessProbe?.httpGet?.path, `${pod.owner}`).toBe('/readyz');
    }
  });

  it.each(probes)(
    '%s asks a route `sluice %s` serves, on a port its container names',
    async (_, command, httpGet, container) => {
      expect((container.ports ?? []).map((p: any) => p.name)).toContain(httpGet.port);
      const res = await request(`${urls[command]}${httpGet.path}`);
      await res.body.dump();
      // 503 is a probe's answer too (not ready); 404 or 401 would fail it for good.
      expect([200, 503]).toContain(res.statusCode);
    },
  );
});
