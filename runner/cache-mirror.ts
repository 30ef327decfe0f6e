/**
 * The runner's mirror of the blocks its engine holds, kept from the engine's KV-cache events
 * (kv-events.ts), and the feed's incarnation gateways number their updates in
 * (runner/protocol/cache-feed.ts).
 *
 * The mirror is true only while every event was heard. So it starts over (every block
 * forgotten, a new epoch, the feed `down`) when a message's sequence number is not the next one
 * (a message lost, or the engine restarted its numbering) and when the engine (re)starts; it is
 * `live` again once it hears the engine: at its next message, or at once when the engine comes
 * up fresh, whose cache is then known to be empty. `AllBlocksCleared` empties it under a new
 * epoch, so every gateway is sent a reset.
 *
 * An engine whose block hashes are not the announced scheme's has its events named anew by a
 * keyer (cache-rekey.ts) before they are applied; the keyer forgets whenever the mirror starts over.
 */
import { randomBytes } from 'node:crypto';
import type { BlockKeyer } from './cache-rekey.ts';
import type { KvEvent, KvEventBatch } from './kv-events.ts';

/** Who hears what the mirror does; the forwarders (cache-forwarder.ts). */
export interface CacheMirrorListener {
  /** Blocks the engine stored and removed, each a change of the mirror. */
  changed(stored: readonly string[], removed: readonly string[]): void;
  /** A new epoch began: what was sent under the old one no longer holds. */
  startedOver(): void;
}

/** What a forwarder reads of the mirror. */
export interface CacheMirrorView {
  readonly epoch: string;
  readonly live: boolean;
  /** Every block key the engine holds, as far as the mirror knows. */
  keys(): string[];
}

/** The mirror; see the module comment. */
export class CacheMirror implements CacheMirrorView {
  readonly #keys = new Set<string>();
  readonly #listeners = new Set<CacheMirrorListener>();
  readonly #newEpoch: () => string;
  #epoch: string;
  #live = false;
  #keyer: BlockKeyer | undefined;
  /** The next sequence number expected; undefined when any will do (after a start-over). */
  #expected: bigint | undefined;

  /** @param newEpoch names each epoch. @default 12 random hex digits */
  constructor(newEpoch: () => string = () => randomBytes(6).toString('hex')) {
    this.#newEpoch = newEpoch;
    this.#epoch = newEpoch();
  }

  get epoch(): string {
    return this.#epoch;
  }

  get live(): boolean {
    return this.#live;
  }

  /** Blocks held now. */
  get size(): number {
    return this.#keys.size;
  }

  keys(): string[] {
    return [...this.#keys];
  }

  /** Adds a listener; returns how to remove it. */
  listen(listener: CacheMirrorListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Names the next engine's blocks with `keyer`, or by the engine's own keys when undefined. Set
   * before that engine's first message; it starts from nothing, as the mirror does for an engine.
   */
  keyWith(keyer: BlockKeyer | undefined): void {
    this.#keyer?.forget();
    this.#keyer = keyer;
  }

  /** The engine came up fresh: its cache is empty and its numbering starts at 0. */
  engineStarted(): void {
    this.#startOver();
    this.#live = true;
    this.#expected = 0n;
  }

  /** The engine is gone (crashed, restarting, stopped): nothing is known until it is heard again. */
  engineLost(): void {
    this.#startOver();
  }

  /** Applies one message's events, or starts over when its number says one was missed. */
  receive(batch: KvEventBatch): void {
    if (this.#expected !== undefined && batch.seq !== this.#expected) {
      this.#startOver();
      return;
    }
    this.#expected = batch.seq + 1n;
    if (!this.#live) {
      this.#live = true;
      this.#tellStartedOver();
    }
    const stored: string[] = [];
    const removed: string[] = [];
    const events = this.#keyer === undefined ? batch.events : this.#keyer.keyed(batch.events);
    for (const event of events) this.#apply(event, stored, removed);
    if (stored.length + removed.length === 0) return;
    for (const listener of this.#listeners) listener.changed(stored, removed);
  }

  #apply(event: KvEvent, stored: string[], removed: string[]): void {
    switch (event.kind) {
      case 'stored':
        for (const key of event.keys) {
          if (this.#keys.has(key)) continue;
          this.#keys.add(key);
          stored.push(key);
        }
        return;
      case 'removed':
        for (const key of event.keys) if (this.#keys.delete(key)) removed.push(key);
        return;
      case 'cleared':
        // Gateways are sent a reset under the new epoch; what this batch said before is moot.
        stored.length = 0;
        removed.length = 0;
        this.#keys.clear();
        this.#epoch = this.#newEpoch();
        this.#tellStartedOver();
        return;
    }
  }

  #startOver(): void {
    this.#keys.clear();
    this.#keyer?.forget();
    this.#epoch = this.#newEpoch();
    this.#live = false;
    this.#expected = undefined;
    this.#tellStartedOver();
  }

  #tellStartedOver(): void {
    for (const listener of this.#listeners) listener.startedOver();
  }
}
