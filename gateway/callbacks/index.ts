/**
 * Callbacks for detached calls: Standard Webhooks signing, the callback URL policy (allowlist
 * and SSRF refusal with the approved address pinned), and retried delivery.
 *
 * Wiring: build one policy and one sender at startup; call `sender.check(url)` when a call
 * arrives with a callback URL (a refusal is a 400), and `sender.send(...)` when it finishes.
 */
export { createCallbackSender } from './delivery.ts';
export type { CallbackDelivery, CallbackMessage, CallbackSender, DeliveryResult } from './delivery.ts';
export { CallbackConfigError, CallbackRefusedError, CallbackSecretError } from './errors.ts';
export type { RefusalReason } from './errors.ts';
export type { CallbackSenderConfig, CallbackSenderOptions } from './options.ts';
export {
  METADATA_ADDRESSES,
  METADATA_HOSTNAMES,
  classifyAddress,
  compileNetworks,
  isMetadataHostname,
  sameAddress,
} from './address.ts';
export type { AddressClass, EmbeddingKind, NetworkList, SpecialRange } from './address.ts';
export { generateWebhookSecret, parseWebhookSecret, signWebhook, verifyWebhook, WEBHOOK_HEADERS } from './signing.ts';
export type {
  WebhookHeaders,
  WebhookRejection,
  WebhookSignInput,
  WebhookVerification,
  WebhookVerifyInput,
} from './signing.ts';
export { callbackPolicyDefaults, createCallbackPolicy } from './targets.ts';
export type { CallbackPolicy, CallbackPolicyOptions, CallbackTarget, HostLookup, ResolvedAddress } from './targets.ts';
