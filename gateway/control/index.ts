/**
 * Deployments: what a deployment is, where it is kept, the file it may
 * come from and its operator routes; the reconciler that keeps each deployment's replicas, with
 * its autoscaler, placement of replicas and start operations.
 */
export { checkDeployment, deploymentDefaults, MAX_REPLICAS } from './deployments.ts';
export type { Deployment, DeploymentCheck, DeploymentProfile } from './deployments.ts';
export { MemoryDeploymentStore, byModel } from './store.ts';
export type {
  DeploymentDelete,
  DeploymentPut,
  DeploymentSource,
  DeploymentStore,
  MemoryDeploymentStoreOptions,
  StoredDeployment,
} from './store.ts';
export { RedisDeploymentStore } from './redis-store.ts';
export type { RedisDeploymentStoreOptions } from './redis-store.ts';
export type { RedisConnectionOptions } from './redis-client.ts';
export { MemoryLease, RedisLease, leaseDefaults } from './lease.ts';
export type { RedisLeaseOptions } from './lease.ts';
export { MemoryDemandBoard, MemoryStatusBoard, RedisDemandBoard, RedisStatusBoard, boardDefaults } from './boards.ts';
export type {
  DemandBoard,
  MemoryStatusBoardOptions,
  RedisDemandBoardOptions,
  RedisStatusBoardOptions,
  StatusBoard,
  StatusBoardOptions,
} from './boards.ts';
export { loadDeploymentsFile, parseDeploymentsFile } from './file.ts';
export { HIDDEN_ENV_VALUE, IDLE_STATUS, deploymentAnswer, registerDeploymentRoutes } from './routes.ts';
export type { DeploymentStatus, DeploymentStatusSource } from './routes.ts';
export { Serverless } from './serverless.ts';
export type { ReconcilerSettings, ServerlessInit, WaitingCalls } from './serverless.ts';
export { createDeploymentMetrics } from './metrics.ts';
export type { DeploymentMetrics, DeploymentSource as DeploymentMetricsSource } from './metrics.ts';
export { FRESH_SCALE_MEMORY, ModelAutoscaler, decideScale } from './autoscaler.ts';
export type { AutoscalerWindows, ScaleDecision, ScaleInput, ScaleLoad, ScaleMemory } from './autoscaler.ts';
export { fitRunner, fitsFor, placeReplica } from './replica-fit.ts';
export type { Occupant, Placement, PlacementInput, RunnerFit } from './replica-fit.ts';
export { DeadLetters, StartOperation, attemptOutcome, startBackoff } from './operations.ts';
export type { AttemptOutcome, DeadLetter, InFlightAttempt, RetrySteps, StartAttempt } from './operations.ts';
export {
  SCALE_EVENTS_KEPT,
  reconcilerDefaults,
  resolveReconcilerOptions,
  systemReconcilerTimers,
} from './reconciler-options.ts';
export type {
  PendingStatus,
  ReconcilerConfig,
  ReconcilerDependencies,
  ReconcilerDeploymentStatus,
  ReconcilerEvent,
  ReconcilerInit,
  ReconcilerOptions,
  ReconcilerTimers,
  ReplicaState,
  ReplicaStatus,
  ScaleEventRecord,
} from './reconciler-options.ts';
export { Reconciler, replicaId } from './reconciler.ts';
export { COLD_START_HEADER, ColdStartWaits } from './cold-start.ts';
export type { ColdStarts } from './cold-start.ts';
export type { FleetRunner } from './fleet.ts';
export { plan } from './plan.ts';
export type { DeployedModel, FleetSnapshot, PlanConfig, PlanContext } from './plan.ts';
export { Book, occupantsOf, replicasOf, reportedReplicas } from './book.ts';
export type { Block, BookLimits, OrderEntry, PendingStart } from './book.ts';
export type { ReconcileAction } from './actions.ts';
