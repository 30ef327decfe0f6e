/**
 * The control plane's face: deployments (what one is, their checks, the file they may come
 * from), their stores, their operator routes, and Serverless, which keeps each deployment's
 * replicas and lets calls wait for a cold start. The reconciler, its plan and book, the
 * autoscaler, replica fit and start operations stay inside the room, reached through Serverless.
 */
export { checkDeployment, deploymentDefaults, MAX_REPLICAS } from './deployments.ts';
export type { Deployment, DeploymentCheck, DeploymentProfile } from './deployments.ts';
export { MemoryDeploymentStore } from './store.ts';
export type { DeploymentSource, DeploymentStore, StoredDeployment } from './store.ts';
export { RedisDeploymentStore } from './redis-store.ts';
export { RedisLease } from './lease.ts';
export { RedisDemandBoard, RedisStatusBoard } from './boards.ts';
export { loadDeploymentsFile } from './file.ts';
export { registerDeploymentRoutes } from './routes.ts';
export { Serverless } from './serverless.ts';
export type { ReconcilerSettings } from './serverless.ts';
export { reconcilerDefaults } from './reconciler-options.ts';
export type { ReconcilerDeploymentStatus } from './reconciler-options.ts';
export { COLD_START_HEADER, ColdStartWaits } from './cold-start.ts';
export type { ColdStarts } from './cold-start.ts';
