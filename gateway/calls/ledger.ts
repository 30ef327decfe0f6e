/**
 * A call's ledger: the one owner of what a call holds of the gateway's counts. A call holds, in
 * turn, an upload (its body being received, counted by the upload budget), a place among the
 * calls in flight (against maxInFlight), and a place in one gauge: `queued` from the start of
 * placement until a runner commits, `running` until its answer ends. Each move takes the call
 * out of what it held before, and {@link CallLedger.close} out of whatever it still holds, so no
 * path through the call can leave a count unbalanced or a drain waiting.
 */
import type { Count } from '../observe/index.ts';
import type { UploadAdmission } from './admission.ts';

/** A gauge a call can be in. */
type Gauge = 'queued' | 'running';

/** What one gateway's calls are counted in; the agent reads it for maxInFlight and its drain. */
export class CallBooks {
  readonly #gauges: Readonly<Record<Gauge, Count>>;
  readonly #uploads: { readonly size: number };
  #inFlight = 0;
  /** Called whenever a call lets go of the last thing it held (a drain listens). */
  onRelease: (() => void) | undefined;

  /** @param uploads the upload budget, whose size is the uploads in progress */
  constructor(gauges: Readonly<Record<Gauge, Count>>, uploads: { readonly size: number }) {
    this.#gauges = gauges;
    this.#uploads = uploads;
  }

  /** Calls whose body is buffered and not yet ended. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** True when nothing is uploading or in flight. */
  get idle(): boolean {
    return this.#inFlight === 0 && this.#uploads.size === 0;
  }

  /** Opens the ledger of a call whose upload `upload` admitted. */
  open(upload: Extract<UploadAdmission, { kind: 'admitted' }>): CallLedger {
    return new CallLedger(this, upload);
  }

  /** @internal the ledger's moves */
  add(n: number): void {
    this.#inFlight += n;
  }

  /** @internal the ledger's moves */
  gauge(name: Gauge): Count {
    return this.#gauges[name];
  }
}

/** One call's holdings; see the file comment. */
export class CallLedger {
  readonly #books: CallBooks;
  #upload: { release(): void } | undefined;
  #inFlight = false;
  #gauge: Gauge | undefined;

  constructor(books: CallBooks, upload: { release(): void }) {
    this.#books = books;
    this.#upload = upload;
  }

  /** The body was read (or failed): the upload is released. */
  bodyRead(): void {
    this.#upload?.release();
    this.#upload = undefined;
  }

  /** The call counts among the calls in flight. */
  admit(): void {
    if (this.#inFlight) return;
    this.#inFlight = true;
    this.#books.add(1);
  }

  /** The call waits for a runner: counted as queued until {@link running} or {@link close}. */
  queued(): void {
    this.#move('queued');
  }

  /** Placement ended, or the answer did: out of the queued or running gauge. */
  done(): void {
    this.#move(undefined);
  }

  /** A runner committed: counted as running until {@link close}. */
  running(): void {
    this.#move('running');
  }

  /** The call ended: lets go of whatever it still holds. Idempotent. */
  close(): void {
    this.bodyRead();
    this.#move(undefined);
    if (this.#inFlight) {
      this.#inFlight = false;
      this.#books.add(-1);
    }
    this.#books.onRelease?.();
  }

  #move(to: Gauge | undefined): void {
    if (this.#gauge === to) return;
    if (this.#gauge !== undefined) this.#books.gauge(this.#gauge).add(-1);
    if (to !== undefined) this.#books.gauge(to).add(1);
    this.#gauge = to;
  }
}
