/**
 * Deployments (issue 14, first slice): what a deployment is, where it is kept, the file it may
 * come from and its operator routes. Nothing acts on a deployment yet: the reconciler is to come.
 */
export { checkDeployment, deploymentDefaults, MAX_REPLICAS } from './deployments.ts';
export type { Deployment, DeploymentCheck, DeploymentProfile } from './deployments.ts';
export { MemoryDeploymentStore, byModel } from './store.ts';
export type { DeploymentDelete, DeploymentPut, DeploymentSource, DeploymentStore, MemoryDeploymentStoreOptions, StoredDeployment } from './store.ts';
export { RedisDeploymentStore } from './redis-store.ts';
export type { RedisDeploymentStoreOptions } from './redis-store.ts';
export type { RedisConnectionOptions } from './redis-client.ts';
export { MemoryLease, RedisLease, leaseDefaults } from './lease.ts';
export type { RedisLeaseOptions } from './lease.ts';
export { MemoryDemandBoard, MemoryStatusBoard, RedisDemandBoard, RedisStatusBoard, boardDefaults } from './boards.ts';
export type { DemandBoard, MemoryStatusBoardOptions, RedisDemandBoardOptions, RedisStatusBoardOptions, StatusBoard, StatusBoardOptions } from './boards.ts';
export { loadDeploymentsFile, parseDeploymentsFile } from './file.ts';
export { HIDDEN_ENV_VALUE, IDLE_STATUS, deploymentAnswer, registerDeploymentRoutes } from './routes.ts';
export type { DeploymentStatus } from './routes.ts';
