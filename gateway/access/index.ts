/**
 * Who may call what: the route table and its scopes, credentials, the guard, client keys,
 * their limits and token budgets, secrets and the audit line.
 *
 * The room's public face: what other rooms take from it.
 */
export { AuditLog, changedFields } from './audit.ts';
export { Credentials, newToken } from './credentials.ts';
export { accessGuard, unscopedRoutes } from './guard.ts';
export { KeyCalls } from './key-calls.ts';
export type { KeyCall } from './key-calls.ts';
export { ClientKeysWatch } from './key-health.ts';
export { registerKeyRoutes } from './key-routes.ts';
export { KeyRing, checkKeySpec, hashToken, keyIdOf, newKeyToken } from './keys.ts';
export { parseKeysFile } from './keys-file.ts';
export { LIMIT_FIELDS, createMemoryLimiter } from './limits.ts';
export type { Limiter } from './limits.ts';
export { invokeRefusal, keyOf, modelRefusal, visibleModels } from './model-access.ts';
export { ANONYMOUS, ROUTE_SCOPES } from './scopes.ts';
export type { Caller, ClientKeys, GatewayEnv, RouteScope } from './scopes.ts';
export { readSecretLines } from './secrets.ts';
export { stripInjectedUsage } from './usage-strip.ts';
export { withUsageAsked } from './token-budget.ts';
