/**
 * Deployments (issue 14, first slice): what a deployment is, where it is kept, the file it may
 * come from and its operator routes. Nothing acts on a deployment yet: the reconciler is to come.
 */
export { checkDeployment, deploymentDefaults, MAX_REPLICAS } from './deployments.ts';
export type { Deployment, DeploymentCheck, DeploymentProfile } from './deployments.ts';
export { MemoryDeploymentStore } from './store.ts';
export type { DeploymentDelete, DeploymentPut, DeploymentSource, DeploymentStore, MemoryDeploymentStoreOptions, StoredDeployment } from './store.ts';
export { loadDeploymentsFile, parseDeploymentsFile } from './file.ts';
export { HIDDEN_ENV_VALUE, IDLE_STATUS, deploymentAnswer, registerDeploymentRoutes } from './routes.ts';
export type { DeploymentStatus } from './routes.ts';
