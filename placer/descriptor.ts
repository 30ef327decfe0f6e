/**
 * How a placer describes itself to the registry, as Caddy's modules do: its name, its defaults,
 * the option keys a config may set, and a factory. The registry is built from these, so a new
 * placer is added in its own folder and nowhere else.
 */
import type { Clock } from './kernel/index.ts';
import type { Placer } from './types.ts';

/** What the gateway hands a placer it creates: load-aware placers read time from its clock. */
export interface PlacerContext {
  /** The gateway's clock, the one runners' load reports are stamped with. */
  readonly clock: Clock;
}

/** A placer folder's self-description, exported as `descriptor` from its index.ts. */
export interface PlacerDescriptor {
  /** The name `--placer` takes, and the placer's own `name`. */
  readonly name: string;
  /** The defaults of the options in `optionKeys`, as the placer applies them. */
  readonly defaults: Readonly<Record<string, unknown>>;
  /** Options a config may set; functions such as `random` are code-only and not listed. */
  readonly optionKeys: readonly string[];
  /**
   * A fresh placer (placers keep state two gateways must not share).
   * @throws PlacerConfigError naming a bad option.
   */
  create(options: Record<string, unknown> | undefined, context: PlacerContext): Placer;
}
