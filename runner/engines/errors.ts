/**
 * Errors of the engine kinds, profiles and metrics pages. Codes are stable and listed in
 * docs/errors.md.
 */
import { errorClass } from '../../placer/kernel/index.ts';
import { lineErrorClass } from '../errors.ts';

/** An engine kind name that is not one of the kinds in kinds.ts. */
export class UnknownEngineKindError extends errorClass('RUNNER_UNKNOWN_ENGINE_KIND', 500, 'server_error') {}

/** A profile the runner refuses to launch. */
export class ProfileError extends errorClass('RUNNER_INVALID_PROFILE', 500, 'server_error') {}

/** A line of an engine's /metrics page that is not valid exposition format. */
export class PrometheusParseError extends lineErrorClass('RUNNER_METRICS_PARSE', 502, 'metrics', 120) {}
